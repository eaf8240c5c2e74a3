"""npu-plugin: Huawei Ascend NPUs for Kubernetes through the Device Plugin API and DRA."""

__version__ = "0.1.0"
