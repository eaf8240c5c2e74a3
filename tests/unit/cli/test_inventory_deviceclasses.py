"""`npu-plugin inventory --output deviceclasses`: a class with `extendedResourceName` for every name
the device plugin can advertise, each selecting exactly what the device plugin would hand out for
that name (KEP-5004: unchanged pods asking `limits: {huawei.com/Ascend910: N}` are served by DRA)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from npu_plugin.ascend.device import DEFAULT_DRIVER, id_prefix
from npu_plugin.ascend.vnpu import Vnpu, default_id_range, dp_suffix, static_name
from npu_plugin.cli.main import main
from npu_plugin.deviceplugin.listing import virtual_devices
from npu_plugin.dra.deviceclasses import whole_extended_class
from npu_plugin.host.boot import read_boot_id
from npu_plugin.sim.scheduler import cel_matcher, published_devices
from tests.support.fake_devices import profile_devices

pytestmark = pytest.mark.usefixtures("restore_logging")
REPO = Path(__file__).resolve().parents[3]
# Per profile, the vNPUs that exist on some chips: (physical id, index in the chip's id range,
# template). A chip holding any is offered only through its vNPUs, by both APIs.
EXISTING = {
    "atlas-800t-a2": [(0, 0, "vir05_1c_16g"), (1, 0, "vir10_3c_32g"), (1, 1, "vir05_1c_16g")],
    "atlas-800-9000": [(4, 0, "vir04"), (4, 1, "vir04"), (6, 0, "vir16")],
    "atlas-300i-duo": [(0, 0, "vir02_1c"), (3, 0, "vir04_3c_ndvpp")],
}


def _vnpus(profile: str) -> dict[int, tuple[Vnpu, ...]]:
    types = {d.physical_id: d.device_type for d in profile_devices(profile)}
    chips: dict[int, list[Vnpu]] = {}
    for physical_id, index, template in EXISTING[profile]:
        vnpu_id = default_id_range(physical_id, types[physical_id])[0] + index
        chips.setdefault(physical_id, []).append(Vnpu(physical_id, vnpu_id, template))
    return {p: tuple(v) for p, v in chips.items()}


def _inventory(capsys: pytest.CaptureFixture[str], tmp_path: Path, profile: str, *argv: str) -> list[Any]:
    state = tmp_path / "vnpu.json"
    chips = {str(p): [{"vnpuId": v.vnpu_id, "template": v.template} for v in vs] for p, vs in _vnpus(profile).items()}
    state.write_text(json.dumps({"bootId": read_boot_id(), "recover": True, "vnpus": chips, "faults": {}}))
    base = ["inventory", "--log-level", "error", "--node-name", "n1", "--dev-root", str(tmp_path / "dev")]
    fake = ["--fake-profile", profile, "--fake-vnpu-state", str(state)]
    assert main([*base, *fake, *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def _device_plugin_offers(profile: str) -> dict[str, set[str]]:
    """What the device plugin hands out per resource name, as the DRA device names of the same
    hardware: whole chips without vNPUs, and each vNPU."""
    devices, vnpus = profile_devices(profile), _vnpus(profile)
    offers: dict[str, set[str]] = {}
    for device in devices:
        if device.physical_id not in vnpus:
            offers.setdefault(f"huawei.com/{id_prefix(device.device_type)}", set()).add(device.dra_name)
    for virtual in virtual_devices("huawei.com", devices, vnpus):
        name = static_name(virtual.vnpu.physical_id, virtual.vnpu.vnpu_id)
        offers.setdefault(virtual.resource_name, set()).add(name)
    return offers


def _extended(classes: list[Any]) -> dict[str, str]:
    """resource name → the class's one selector."""
    return {
        c["spec"]["extendedResourceName"]: c["spec"]["selectors"][0]["cel"]["expression"]
        for c in classes
        if "extendedResourceName" in c["spec"]
    }


@pytest.mark.parametrize("profile", sorted(EXISTING))
def test_each_class_selects_exactly_what_the_device_plugin_hands_out(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every class is evaluated against every device the node publishes with --vnpu static (a CEL
    runtime error, e.g. an unguarded optional attribute, fails the test): the devices it selects
    are those the device plugin serves under its name, whole chips and vNPUs alike."""
    classes = _extended(_inventory(capsys, tmp_path, profile, "--vnpu", "static", "-o", "deviceclasses"))
    slices = _inventory(capsys, tmp_path, profile, "--vnpu", "static", "-o", "resourceslice")
    published = published_devices(slices)
    offers = _device_plugin_offers(profile)
    assert offers.keys() <= classes.keys()
    for resource, expression in classes.items():
        matches = cel_matcher(expression)
        selected = {str(d.entry["name"]) for d in published if matches(d)}
        assert selected == offers.get(resource, set()), resource


@pytest.mark.parametrize("profile", ["atlas-800t-a2", "atlas-300i-duo"])
def test_vnpus_on_demand_are_selected_by_the_name_of_their_template(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --vnpu dynamic, each published device (whole chip, existing vNPU, vNPU on demand) is
    selected by exactly one class: the name the device plugin gives its kind. A candidate becomes,
    once prepared, the vNPU the device plugin would hand out under that name."""
    classes = _extended(_inventory(capsys, tmp_path, profile, "--vnpu", "dynamic", "-o", "deviceclasses"))
    matchers = {resource: cel_matcher(expression) for resource, expression in classes.items()}
    slices = _inventory(capsys, tmp_path, profile, "--vnpu", "dynamic", "-o", "resourceslice")
    for device in published_devices(slices):
        attributes = device.entry["attributes"]
        name = f"huawei.com/{id_prefix(attributes['deviceType']['string'])}"
        if "vnpuTemplate" in attributes:
            name += f"-{dp_suffix(attributes['vnpuTemplate']['string'])}"
        assert {r for r, matches in matchers.items() if matches(device)} == {name}, device.entry["name"]


def test_without_vnpu_only_the_whole_npu_names_are_printed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    classes = _inventory(capsys, tmp_path, "atlas-800t-a2", "-o", "deviceclasses")
    assert [(c["metadata"]["name"], c["spec"]["extendedResourceName"]) for c in classes] == [
        ("ascend910.extended.npu.huawei.com", "huawei.com/Ascend910")
    ]


@pytest.mark.parametrize("profile", sorted(EXISTING))
def test_printed_classes_are_valid_device_classes(
    profile: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for obj in _inventory(capsys, tmp_path, profile, "--vnpu", "dynamic", "-o", "deviceclasses"):
        kubernetes_validate.validate(obj, "1.36.0", strict=True)


@pytest.mark.parametrize(
    "path",
    sorted((REPO / "manifests" / "deviceclasses" / "optional").glob("extended-resource-*.yaml")),
    ids=lambda p: p.name,
)
def test_the_optional_manifests_are_what_the_command_prints(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The shipped mapping classes cannot drift from the generator: each equals what `inventory
    --output deviceclasses` prints for the built-in profiles, and the whole-NPU class of each family
    (labels aside)."""
    whole = [whole_extended_class(DEFAULT_DRIVER, prefix) for prefix in ("Ascend910", "Ascend310P", "Ascend310")]
    printed: dict[str, Any] = {c["metadata"]["name"]: c for c in whole}
    for profile in EXISTING:
        for obj in _inventory(capsys, tmp_path, profile, "--vnpu", "static", "-o", "deviceclasses"):
            if "extendedResourceName" in obj["spec"]:
                printed[obj["metadata"]["name"]] = obj
    shipped = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert shipped
    for obj in shipped:
        obj["metadata"].pop("labels", None)
        assert obj == printed[obj["metadata"]["name"]]
