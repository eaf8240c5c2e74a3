"""DeviceClasses the plugin prints (pure): per vNPU template and chip family
(`vir05-1c-16g.ascend910b.vnpu.npu.huawei.com` selects the vNPUs of one template on one chip family,
so a claim can say "a vir05_1c_16g" without writing CEL), and per device-plugin resource name with
`extendedResourceName` (KEP-5004: `ascend910.extended.npu.huawei.com`), selecting exactly what the
device plugin would hand out for that name, so unchanged pods asking
`limits: {huawei.com/Ascend910: N}` are served by DRA.

The family is part of a template class: a template name means different slices on different chips
(`vir04` is a quarter of a 310P and an eighth of a 910A). Every attribute is read behind `has()`:
the scheduler evaluates a class against every device of the driver, whole NPUs included, and a
selector error aborts the allocation of every claim using it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from npu_plugin.ascend.device import DEVICE_TYPES, id_prefix
from npu_plugin.dra.slices import API_VERSION

RESOURCE_DOMAIN = "huawei.com"


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


def extended_class_name(driver: str, resource_name: str) -> str:
    """`huawei.com/Ascend910-5c.1cpu.16g` → `ascend910-5c.1cpu.16g.extended.npu.huawei.com`."""
    return f"{resource_name.split('/', 1)[1].lower()}.extended.{driver}"


def family_types(prefix: str) -> list[str]:
    """The device types one device-plugin name covers: `Ascend910` → 910, 910B and 910C."""
    return [t for t in DEVICE_TYPES if id_prefix(t) == prefix]


def whole_extended_class(driver: str, prefix: str) -> dict[str, Any]:
    """`huawei.com/<prefix>`: every whole NPU of the family (the device plugin never hands out a
    chip split into vNPUs, and a vNPU device carries `vnpuTemplate`)."""
    attributes = f'device.attributes["{driver}"]'
    expression = " && ".join(
        (
            f'device.driver == "{driver}"',
            f"!has({attributes}.vnpuTemplate)",
            _one_of(attributes, "deviceType", family_types(prefix)),
        )
    )
    resource = f"{RESOURCE_DOMAIN}/{prefix}"
    return _device_class(extended_class_name(driver, resource), expression, resource)


def vnpu_extended_class(driver: str, prefix: str, suffix: str, templates: Iterable[str]) -> dict[str, Any]:
    """`huawei.com/<prefix>-<suffix>`: the vNPUs of the family whose template has that suffix (one
    suffix may come from several template names, e.g. `vir10_3c_16g_nm` and `..._ndvpp`)."""
    attributes = f'device.attributes["{driver}"]'
    expression = " && ".join(
        (
            f'device.driver == "{driver}"',
            _one_of(attributes, "vnpuTemplate", sorted(set(templates))),
            _one_of(attributes, "deviceType", family_types(prefix)),
        )
    )
    resource = f"{RESOURCE_DOMAIN}/{prefix}-{suffix}"
    return _device_class(extended_class_name(driver, resource), expression, resource)


def extended_device_classes(
    driver: str, device_types: Iterable[str], vnpu_templates: Mapping[tuple[str, str], Iterable[str]]
) -> list[dict[str, Any]]:
    """A class per whole-NPU name of these device types, then per vNPU name (`(prefix, suffix)` →
    the template names that give it), each once, sorted by name."""
    whole = [whole_extended_class(driver, prefix) for prefix in sorted({id_prefix(t) for t in device_types})]
    vnpus = [vnpu_extended_class(driver, p, s, templates) for (p, s), templates in sorted(vnpu_templates.items())]
    return whole + vnpus


def _one_of(attributes: str, name: str, choices: list[str]) -> str:
    """The attribute, read behind `has()`, is one of `choices`."""
    value = f"{attributes}.{name}"
    test = f'{value} == "{choices[0]}"' if len(choices) == 1 else f"{value} in {json.dumps(choices)}"
    return f"has({value}) && {test}"


def _device_class(name: str, expression: str, extended_resource_name: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": expression}}]}
    if extended_resource_name is not None:
        spec = {"extendedResourceName": extended_resource_name} | spec
    return {"apiVersion": API_VERSION, "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}
