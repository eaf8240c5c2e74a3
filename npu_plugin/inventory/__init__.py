"""What this node has now: devices, their health and owners, and each chip's vNPUs, with the feeds
that keep them current."""
