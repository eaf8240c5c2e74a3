"""What an Ascend NPU is, wherever it was found and however it is served: devices, device nodes,
vNPU templates, HCCS topology, driver codes and what a container gets."""
