"""The npu-smi backend: the `npu-smi` command's output, parsed."""
