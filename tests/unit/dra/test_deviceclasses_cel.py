"""Every DeviceClass the product ships or prints, evaluated with cel-python against every device each fake profile
publishes: a selector error aborts the allocation of every claim using the class, so none may read an attribute a
device lacks; and each printed per-template class selects exactly its template on its chip family."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.fake.profiles import PROFILES
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cli.inventory import Output, run_inventory
from npu_plugin.errors import ConfigError
from npu_plugin.sim.scheduler import PublishedDevice, cel_matcher, published_devices

MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
DRIVER = "npu.huawei.com"
Obj = dict[str, Any]


def inventory(capsys: pytest.CaptureFixture[str], profile: str, form: str, vnpu: VnpuMode) -> list[Obj]:
    """What `npu-plugin inventory --fake-profile PROFILE --vnpu VNPU --output FORM` prints, parsed."""
    options = BackendOptions(kind=BackendKind.FAKE, fake_profile=profile)
    assert run_inventory(options, Output(form, node_name="node-a", driver=DRIVER, vnpu=vnpu)) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def published(capsys: pytest.CaptureFixture[str], profile: str, vnpu: VnpuMode) -> list[PublishedDevice]:
    devices = published_devices(inventory(capsys, profile, "resourceslice", vnpu))
    assert devices
    return devices


def printed_classes(capsys: pytest.CaptureFixture[str], profile: str, vnpu: VnpuMode) -> list[Obj]:
    """`--output deviceclasses`; none where the profile publishes no template (it exits 2 saying so)."""
    if vnpu is VnpuMode.OFF:
        return []
    try:
        return inventory(capsys, profile, "deviceclasses", vnpu)
    except ConfigError:
        return []


def shipped_classes() -> list[Obj]:
    docs = [d for path in sorted(MANIFESTS.rglob("*.yaml")) for d in yaml.safe_load_all(path.read_text()) if d]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "DeviceClass"]


def selected(device_class: Obj, devices: list[PublishedDevice]) -> set[str]:
    """The devices the class selects; a CEL runtime error fails as the scheduler would (UnschedulableError)."""
    matchers = [cel_matcher(s["cel"]["expression"]) for s in device_class["spec"].get("selectors", [])]
    return {d.entry["name"] for d in devices if all(match(d) for match in matchers)}


def attribute(device: PublishedDevice, name: str) -> object:
    value = (device.entry.get("attributes") or {}).get(name)
    return None if value is None else next(iter(value.values()))


@pytest.mark.parametrize("vnpu", list(VnpuMode), ids=str)
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_class_evaluates_on_every_published_device(
    capsys: pytest.CaptureFixture[str], profile: str, vnpu: VnpuMode
) -> None:
    devices = published(capsys, profile, vnpu)
    for device_class in shipped_classes() + printed_classes(capsys, profile, vnpu):
        selected(device_class, devices)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_a_printed_class_selects_its_template_on_its_chip_family_only(
    capsys: pytest.CaptureFixture[str], profile: str
) -> None:
    devices = published(capsys, profile, VnpuMode.DYNAMIC)
    # The extendedResourceName classes select by device-plugin name: tests/unit/cli/test_inventory_deviceclasses.py.
    classes = [c for c in printed_classes(capsys, profile, VnpuMode.DYNAMIC) if "extendedResourceName" not in c["spec"]]
    for device_class in classes:
        names = selected(device_class, devices)
        chosen = [d for d in devices if d.entry["name"] in names]
        kinds = {(attribute(d, "vnpuTemplate"), attribute(d, "deviceType")) for d in chosen}
        assert len(kinds) == 1, (device_class["metadata"]["name"], kinds)
        (template, family) = kinds.pop()
        assert template is not None
        same = {
            d.entry["name"]
            for d in devices
            if (attribute(d, "vnpuTemplate"), attribute(d, "deviceType"))
            == (
                template,
                family,
            )
        }
        assert {d.entry["name"] for d in chosen} == same
        # The same template name on another family (vir04 is a 310P and a 910A template) is not this class's.
        other = "Ascend910" if family != "Ascend910" else "Ascend310P"
        moved = [
            PublishedDevice(
                d.driver, d.pool, {**d.entry, "attributes": {**d.entry["attributes"], "deviceType": {"string": other}}}
            )
            for d in chosen
        ]
        assert selected(device_class, moved) == set()
    names = [c["metadata"]["name"] for c in classes]
    assert len(names) == len(set(names))


def test_vir04_gets_one_class_per_chip_family() -> None:
    from npu_plugin.dra.deviceclasses import template_device_classes

    names = [
        c["metadata"]["name"]
        for c in template_device_classes(DRIVER, [("Ascend310P", "vir04"), ("Ascend910", "vir04")])
    ]
    assert names == ["vir04.ascend310p.vnpu.npu.huawei.com", "vir04.ascend910.vnpu.npu.huawei.com"]
