"""Per-template vNPU DeviceClasses (pure): `vir05-1c-16g.vnpu.npu.huawei.com` selects the vNPUs of
one template, so a claim can say "a vir05_1c_16g" without writing CEL."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from npu_plugin.dra.slices import API_VERSION


def template_class_name(driver: str, template: str) -> str:
    return f"{template.replace('_', '-')}.vnpu.{driver}"


def template_device_class(driver: str, template: str) -> dict[str, Any]:
    expression = f'device.driver == "{driver}" && device.attributes["{driver}"].vnpuTemplate == "{template}"'
    return {
        "apiVersion": API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": template_class_name(driver, template)},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


def template_device_classes(driver: str, templates: Iterable[str]) -> list[dict[str, Any]]:
    """One class per template name, sorted, each once."""
    return [template_device_class(driver, t) for t in sorted(set(templates))]
