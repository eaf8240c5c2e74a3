"""The fake backend: devices from a built-in profile or an inventory file, and simulated vNPU
hardware."""
