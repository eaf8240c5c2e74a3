"""What `migrate` is asked to do; free of the YAML machinery so the CLI can load it cheaply."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_RESOURCE_NAME = "huawei.com/Ascend910"
DEFAULT_DEVICE_CLASS = "npu.huawei.com"
# The DRA driver publishes topologyGroup under its own name, whatever the class is called.
DEFAULT_DRIVER_NAME = "npu.huawei.com"


@dataclass(frozen=True, slots=True)
class Options:
    resource_name: str = DEFAULT_RESOURCE_NAME
    device_class: str = DEFAULT_DEVICE_CLASS
    same_topology_group: bool = False
    driver_name: str = DEFAULT_DRIVER_NAME

    @property
    def topology_attribute(self) -> str | None:
        return f"{self.driver_name}/topologyGroup" if self.same_topology_group else None
