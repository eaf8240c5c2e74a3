"""`npu-plugin inventory --vnpu ... --output resourceslice|deviceclasses`: the layouts an API server
version gets, and the per-template DeviceClasses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import celpy
import pytest
import yaml
from celpy.adapter import json_to_cel

from npu_plugin.cli.main import main

pytestmark = pytest.mark.usefixtures("restore_logging")


def inventory(capsys: pytest.CaptureFixture[str], tmp_path: Path, *argv: str) -> list[Any]:
    base = ["inventory", "--log-level", "error", "--node-name", "n1", "--dev-root", str(tmp_path / "dev")]
    assert main([*base, *argv]) == 0
    return list(yaml.safe_load_all(capsys.readouterr().out))


def test_kubernetes_1_35_gets_a_counter_slice_then_a_device_slice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # A2
    argv = ("--fake-profile", "atlas-800t-a2", "--vnpu", "dynamic", "-o", "resourceslice")
    default, explicit = (
        inventory(capsys, tmp_path, *argv),
        inventory(capsys, tmp_path, *argv, "--kubernetes-version", "1.35"),
    )
    assert default == explicit
    counters, devices = (s["spec"] for s in default)
    assert list(counters) == ["driver", "nodeName", "pool", "sharedCounters"]
    assert list(devices) == ["driver", "nodeName", "pool", "devices"]
    assert len(counters["sharedCounters"]) == 8
    assert len(devices["devices"]) == 56
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in default} == {2}
    assert list(tmp_path.iterdir()) == []


def test_kubernetes_1_34_gets_one_slice_per_chip_with_its_counters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:  # A3
    argv = (
        "--fake-profile",
        "atlas-800t-a2",
        "--vnpu",
        "dynamic",
        "-o",
        "resourceslice",
        "--kubernetes-version",
        "1.34",
    )
    built = inventory(capsys, tmp_path, *argv)
    assert [len(s["spec"]["sharedCounters"]) for s in built] == [1] * 8
    assert [len(s["spec"]["devices"]) for s in built] == [7] * 8


def test_static_mode_prints_no_counters(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    built = inventory(capsys, tmp_path, "--fake-profile", "atlas-800t-a2", "--vnpu", "static", "-o", "resourceslice")
    assert [d["name"] for d in built[0]["spec"]["devices"]] == [f"npu-{i}" for i in range(8)]
    assert "sharedCounters" not in built[0]["spec"]


def _selects(expression: str, template: str | None) -> bool:
    attributes = {"deviceType": "Ascend910B"} | ({"vnpuTemplate": template} if template else {})
    device = json_to_cel({"driver": "npu.huawei.com", "attributes": {"npu.huawei.com": attributes}})
    env = celpy.Environment()
    return bool(env.program(env.compile(expression)).evaluate({"device": device}))


def test_deviceclasses_prints_one_class_per_offered_template(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    printed = inventory(capsys, tmp_path, "--fake-profile", "atlas-800t-a2", "--vnpu", "dynamic", "-o", "deviceclasses")
    classes = [c for c in printed if "extendedResourceName" not in c["spec"]]
    assert [c["metadata"]["name"] for c in classes] == [
        "vir05-1c-16g.ascend910b.vnpu.npu.huawei.com",
        "vir10-3c-32g.ascend910b.vnpu.npu.huawei.com",
    ]
    ((selector,),) = [c["spec"]["selectors"] for c in classes[:1]]
    expression = selector["cel"]["expression"]
    assert 'device.attributes["npu.huawei.com"].vnpuTemplate == "vir05_1c_16g"' in expression
    assert _selects(expression, "vir05_1c_16g")
    assert not _selects(expression, "vir10_3c_32g")
    assert not _selects(expression, None)  # a whole NPU: no vnpuTemplate, no CEL error
    offered = inventory(
        capsys,
        tmp_path,
        "--fake-profile",
        "atlas-800t-a2",
        "--vnpu",
        "dynamic",
        "--vnpu-templates",
        "vir10_3c_32g",
        "-o",
        "deviceclasses",
    )
    assert [c["metadata"]["name"] for c in offered if "extendedResourceName" not in c["spec"]] == [
        "vir10-3c-32g.ascend910b.vnpu.npu.huawei.com"
    ]


def _exit_code(argv: list[str]) -> int:
    """main's code, or the usage exit argparse makes for a malformed flag."""
    try:
        return main(argv)
    except SystemExit as exited:
        return int(exited.code or 0)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ("--vnpu", "dynamic", "-o", "resourceslice", "--kubernetes-version", "1.33"),
            "'1.33' is not a Kubernetes version 1.34 or later",
        ),
        (
            ("--vnpu", "dynamic", "-o", "resourceslice", "--kubernetes-version", "2.0"),
            "'2.0' is not a Kubernetes version",
        ),
    ],
)
def test_bad_requests_exit_2_with_one_line(
    argv: tuple[str, ...], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = _exit_code(
        ["inventory", "--fake-profile", "atlas-800t-a2", "--node-name", "n1", "--dev-root", str(tmp_path), *argv]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
