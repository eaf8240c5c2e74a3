"""NUMA node and PCIe root from a sysfs tree laid out like the kernel's (real files and links in
tmp)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from npu_plugin.backends.auto import discover, numa_from_sysfs, pcie_root_from_sysfs
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.slices import device_entry
from tests.support.fake_devices import profile_devices

BUS = "0000:c1:00.0"


def make_sysfs(root: Path, bus: str = BUS, numa: str | None = "3\n", parent: str = "pci0000:c0/0000:c0:01.0") -> Path:
    device = root / "devices" / parent / bus
    device.mkdir(parents=True)
    if numa is not None:
        (device / "numa_node").write_text(numa)
    links = root / "bus/pci/devices"
    links.mkdir(parents=True, exist_ok=True)
    (links / bus).symlink_to(device)
    return root


@pytest.mark.parametrize(("numa", "expected"), [("3\n", 3), ("-1\n", None), ("garbage", None), (None, None)])
def test_numa_node(tmp_path: Path, numa: str | None, expected: int | None) -> None:
    assert numa_from_sysfs(BUS, make_sysfs(tmp_path, numa=numa)) == expected


def test_pcie_root_is_the_root_complex_the_device_hangs_off(tmp_path: Path) -> None:
    assert pcie_root_from_sysfs(BUS, make_sysfs(tmp_path)) == "pci0000:c0"


@pytest.mark.parametrize("bus", [None, "0000:99:00.0"])
def test_unknown_bus_ids_tell_nothing(tmp_path: Path, bus: str | None) -> None:
    sysfs = make_sysfs(tmp_path)
    assert (numa_from_sysfs(bus, sysfs), pcie_root_from_sysfs(bus, sysfs)) == (None, None)


def test_fake_devices_never_take_this_hosts_sysfs_facts(tmp_path: Path) -> None:
    sysfs = make_sysfs(tmp_path, numa="7\n")
    [first, *_] = discover(FakeBackend(profile="atlas-800t-a2"), sysfs)
    assert (first.pci_bus_id, first.numa_node, first.pcie_root) == (BUS, 0, None)


def test_the_slice_carries_the_standard_pcie_attributes() -> None:
    device = profile_devices("atlas-800t-a2")[0]
    entry = device_entry("npu.huawei.com", replace(device, pcie_root="pci0000:c0"), True, UnhealthyPolicy.REMOVE)
    assert entry is not None
    assert entry["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": BUS}
    assert entry["attributes"]["resource.kubernetes.io/pcieRoot"] == {"string": "pci0000:c0"}
