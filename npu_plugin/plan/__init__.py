"""`npu-plugin plan`: what the live cluster must do, node by node, to reach DRA (or the device
plugin, or both) without disruption. `snapshot.py` holds what was read, `objects.py` turns API
objects into it, `planner.py` decides (pure), `render.py` prints, `read.py` reads (list only)."""
