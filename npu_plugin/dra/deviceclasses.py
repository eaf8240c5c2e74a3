"""Per-template vNPU DeviceClasses (pure): `vir05-1c-16g.ascend910b.vnpu.npu.huawei.com` selects the
vNPUs of one template on one chip family, so a claim can say "a vir05_1c_16g" without writing CEL.

The family is part of the class: a template name means different slices on different chips (`vir04`
is a quarter of a 310P and an eighth of a 910A). Every attribute is read behind `has()`: the
scheduler evaluates a class against every device of the driver, whole NPUs included, and a selector
error aborts the allocation of every claim using it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from npu_plugin.dra.slices import API_VERSION


def template_class_name(driver: str, device_type: str, template: str) -> str:
    return f"{template.replace('_', '-')}.{device_type.lower()}.vnpu.{driver}"


def template_device_class(driver: str, device_type: str, template: str) -> dict[str, Any]:
    attributes = f'device.attributes["{driver}"]'
    expression = (
        f'device.driver == "{driver}" && has({attributes}.vnpuTemplate) && {attributes}.vnpuTemplate == "{template}" '
        f'&& has({attributes}.deviceType) && {attributes}.deviceType == "{device_type}"'
    )
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": template_class_name(driver, device_type, template)},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def template_device_classes(driver: str, templates: Iterable[tuple[str, str]]) -> list[dict[str, Any]]:
    """One class per (chip family, template name), sorted, each once."""
    return [template_device_class(driver, family, template) for family, template in sorted(set(templates))]
