"""What `migrate` is asked to do; free of the YAML machinery so the CLI can load it cheaply."""

from __future__ import annotations

from dataclasses import dataclass

from npu_plugin.ascend.device import DEFAULT_DRIVER

# Each device-plugin resource name and the shipped DeviceClass selecting what that name could get.
RESOURCE_DEVICE_CLASSES = {
    "huawei.com/Ascend910": "ascend910.npu.huawei.com",
    "huawei.com/Ascend310P": "ascend310p.npu.huawei.com",
    "huawei.com/Ascend310": "ascend310.npu.huawei.com",
}
KNOWN_RESOURCE_NAMES = tuple(RESOURCE_DEVICE_CLASSES)
# Every vNPU (shipped with the other classes): claims for HAMi/Volcano vNPU requests ask for it
# whatever the class of whole NPUs is.
VNPU_DEVICE_CLASS = "vnpu.npu.huawei.com"
# The DRA driver publishes topologyGroup under its own name, whatever the class is called.
STDIO = "-"  # --filename/--output: stdin or stdout


@dataclass(frozen=True, slots=True)
class Options:
    resource_names: tuple[str, ...] = KNOWN_RESOURCE_NAMES
    device_class: str | None = None  # one class for every resource instead of each one's own
    same_topology_group: bool = False
    driver_name: str = DEFAULT_DRIVER
    # HAMi-style `<family>-memory`/`-core` requests of one NPU become a claim for a share of a shared
    # NPU of this class (capacity requests) instead of a vNPU.
    shared_device_class: str | None = None

    def device_class_for(self, resource: str) -> str | None:
        """The class a claim for `resource` asks for; None for a name with no shipped class and no
        device_class."""
        return self.device_class or RESOURCE_DEVICE_CLASSES.get(resource)

    @property
    def topology_attribute(self) -> str | None:
        return f"{self.driver_name}/topologyGroup" if self.same_topology_group else None
