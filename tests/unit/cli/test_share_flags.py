"""`--share-devices`, `--share-count`, `--share-allocation`: each bad value exits 2 with one line
naming the flag, before anything is started."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.backends.fake.inventory_file import inventory_document
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.cli.main import main
from npu_plugin.cli.simulate import shared_demo
from npu_plugin.config import Mode

SERVE = ["serve", "--backend", "fake", "--fake-profile", "atlas-300i-duo"]
pytestmark = pytest.mark.usefixtures("restore_logging")


@pytest.mark.parametrize(
    ("flags", "line"),
    [
        (["--share-count", "1"], "argument --share-count: '1' is not a whole number of shares from 2 to 100"),
        (["--share-count", "101"], "argument --share-count: '101' is not a whole number of shares from 2 to 100"),
        (["--share-count", "four"], "argument --share-count: 'four' is not a whole number of shares from 2 to 100"),
        (["--share-allocation", "fill"], "argument --share-allocation: 'fill' is not one of spread, pack"),
    ],
)
def test_a_bad_share_flag_exits_2_naming_it(
    flags: list[str], line: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([*SERVE, "--device-plugin-path", str(tmp_path), *flags])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1] == f"npu-plugin serve: error: {line}", err
    assert list(tmp_path.iterdir()) == []


def test_an_unknown_shared_chip_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SERVE, "--device-plugin-path", str(tmp_path), "--share-devices", "9"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "npu-plugin serve: error: --share-devices: no device with physical id [9] on this node (devices: [0, 1, 2, 3])"
    )
    assert list(tmp_path.iterdir()) == []


def test_a_shared_chip_holding_vnpus_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = profile_inventory("atlas-300i-duo")
    chips = {p: replace(chip, vnpus=(Vnpu(2, 132, "vir02"),) if p == 2 else ()) for p, chip in profile.vnpu.items()}
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(yaml.safe_dump(inventory_document(profile.devices, chips), sort_keys=False))
    argv = ["serve", "--backend", "fake", "--fake-inventory", str(inventory), "--vnpu", "static"]
    argv += ["--fake-vnpu-state", str(tmp_path / "hw.json"), "--device-plugin-path", str(tmp_path)]
    assert main([*argv, "--share-devices", "all"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "npu-plugin serve: error: --share-devices: npu-2 (1 vNPU(s)) hold(s) vNPUs; a shared chip is never split: "
        "destroy its vNPUs or leave it out of --share-devices"
    )


def test_dra_cannot_share_a_chip_without_memory_to_divide(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text("devices:\n  - {physicalId: 0, chipName: 310P3, memory: 3Mi}\n")
    argv = ["serve", "--mode", "dra", "--node-name", "n1", "--backend", "fake", "--fake-inventory", str(inventory)]
    argv += ["--state-dir", str(tmp_path / "state"), "--kubelet-plugins-directory-path", str(tmp_path)]
    assert main([*argv, "--share-devices", "0", "--share-count", "4"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "npu-plugin serve: error: --share-devices: npu-0 reports 3145728 bytes of memory, too little for 4 shares of "
        "a MiB; DRA cannot publish its shares"
    )


def test_inventory_shows_the_shares_of_each_chip(capsys: pytest.CaptureFixture[str]) -> None:
    inventory = ["inventory", "--backend", "fake", "--fake-profile", "atlas-300i-duo"]
    assert main([*inventory, "--share-devices", "0-1", "--share-count", "3"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0][-1] == "SHARES"
    assert [row[-1] for row in rows[1:]] == ["8Gi", "8Gi", "-", "-"]
    assert [" ".join(row[-3:]) for row in rows[1:3]] == ["3 x 8Gi"] * 2
    assert main(inventory) == 0
    assert "SHARES" not in capsys.readouterr().out
    assert main([*inventory, "--share-devices", "5"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "npu-plugin inventory: error: --share-devices: no device with physical id [5] on this node "
        "(devices: [0, 1, 2, 3])"
    )


@pytest.mark.parametrize(("version", "shared"), [("1.35", False), ("1.36", True)])
def test_inventory_resourceslice_shows_shared_chips_as_that_release_publishes_them(
    version: str, shared: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["inventory", "--backend", "fake", "--fake-profile", "atlas-300i-duo", "-o", "resourceslice"]
    argv += ["--node-name", "n1", "--kubernetes-version", version, "--share-devices", "0", "--share-count", "3"]
    assert main(argv) == 0
    (slice_,) = yaml.safe_load_all(capsys.readouterr().out)
    devices = slice_["spec"]["devices"]
    assert [d.get("allowMultipleAllocations", False) for d in devices] == [shared, False, False, False]


def test_simulate_shares_the_last_chip_of_each_side() -> None:
    duo = profile_inventory("atlas-300i-duo").devices
    assert shared_demo(duo, Mode.DEVICE_PLUGIN, set()) == "3"
    assert shared_demo(duo, Mode.DRA, {0, 1, 2, 3}) == "3"
    assert shared_demo(duo, Mode.BOTH, {2, 3}) == "1,3"
