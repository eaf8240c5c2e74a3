"""`npu-plugin inventory --vnpu`: the vNPU tables, the inventory file's `vnpu:` blocks, and --vnpu
off unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from npu_plugin.backends.fake.inventory_file import parse_inventory_file
from npu_plugin.backends.fake.profiles import PROFILES, profile_inventory
from npu_plugin.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging")


def inventory(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["inventory", "--log-level", "error", *argv]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("profile", sorted(PROFILES))
@pytest.mark.parametrize("output", ["table", "json", "yaml", "resourceslice"])
def test_vnpu_off_changes_no_byte_of_any_output(
    profile: str, output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--fake-profile", profile, "-o", output, "--node-name", "n1", "--dev-root", str(tmp_path / "dev")]
    before = inventory(capsys, *argv)
    off = inventory(capsys, *argv, "--vnpu", "off", "--fake-vnpu-state", str(tmp_path / "hw.json"))
    assert off == before
    assert "vnpu" not in before.lower()
    assert list(tmp_path.iterdir()) == []


def test_the_table_shows_templates_totals_and_vnpus_per_chip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = tmp_path / "hw.json"
    state.write_text(
        json.dumps({"bootId": "b", "recover": True, "vnpus": {"1": [{"vnpuId": 116, "template": "vir10_3c_32g"}]}})
    )
    argv = ["--fake-profile", "atlas-800t-a2", "--fake-vnpu-state", str(state), "--dev-root", str(tmp_path / "dev")]
    text = inventory(capsys, *argv, "--vnpu", "dynamic", "--vnpu-templates", "vir05_1c_16g")
    devices, chips, templates = text.rstrip("\n").split("\n\n")
    assert devices == inventory(capsys, *argv).rstrip("\n")
    rows = [line.split() for line in chips.splitlines()]
    assert rows[0] == [
        "CHIP",
        "SERVED",
        "MODE",
        "AICORE",
        "AICPU",
        "VPC",
        "VENC",
        "VDEC",
        "JPEGD",
        "JPEGE",
        "PNGD",
        "IDS",
        "VNPUS",
    ]
    assert rows[1] == ["npu-0", "dynamic", "container", "20", "7", "9", "0", "2", "24", "4", "-", "100-115", "-"]
    assert rows[2][:2] == ["npu-1", "static"] and rows[2][-1] == "116:vir10_3c_32g"
    rows = [line.split() for line in templates.splitlines()]
    assert rows[0][-1] == "CANDIDATES"
    assert rows[1] == ["npu-0", "vir05_1c_16g", "16Gi", "5", "1", "2", "0", "0", "6", "1", "0", "4"]
    assert rows[2][:2] == ["npu-0", "vir10_3c_32g"] and rows[2][-1] == "-"  # not offered
    assert rows[3][:2] == ["npu-1", "vir05_1c_16g"] and rows[3][-1] == "-"  # static: no candidates


def test_static_only_products_show_no_candidates(capsys: pytest.CaptureFixture[str]) -> None:
    text = inventory(capsys, "--fake-profile", "atlas-300i-duo", "--vnpu", "dynamic")
    _, chips, templates = text.rstrip("\n").split("\n\n")
    assert all(line.split()[1] == "whole" for line in chips.splitlines()[1:])
    assert all(line.split()[-1] == "-" for line in templates.splitlines()[1:])


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_the_vnpu_blocks_and_read_back(
    output: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = inventory(capsys, "--fake-profile", "atlas-300i-pro", "--vnpu", "static", "-o", output)
    assert parse_inventory_file(text, "out") == profile_inventory("atlas-300i-pro")
    document = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert document["devices"][0]["vnpu"]["existing"] == []


def test_an_unknown_offered_template_exits_2_naming_the_chip(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inventory", "--fake-profile", "atlas-800t-a2", "--vnpu", "dynamic", "--vnpu-templates", "vir07"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        "npu-plugin inventory: error: --vnpu-templates vir07: npu-0 (910B3) offers vir05_1c_16g, vir10_3c_32g\n"
    )


def test_vnpu_templates_without_dynamic_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inventory", "--fake-profile", "atlas-800t-a2", "--vnpu-templates", "vir05_1c_16g"]
    assert main(argv) == 2
    assert "--vnpu-templates" in capsys.readouterr().err


def test_a_corrupt_state_file_exits_1_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    state = tmp_path / "hw.json"
    state.write_text("{")
    argv = ["inventory", "--fake-profile", "atlas-800t-a2", "--vnpu", "static", "--fake-vnpu-state", str(state)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert (
        err.startswith(f"npu-plugin inventory: error: fake vNPU state {state} is corrupt: not JSON")
        and err.count("\n") == 1
    )
