"""`npu-plugin simulate` walks every step for each mode and profile, and names a failing step."""

from __future__ import annotations

import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

MODES = ("device-plugin", "dra", "both")
PROFILES = ("atlas-800t-a2", "atlas-800-9000", "atlas-300i-duo", "atlas-300i-pro")
DP_STEPS = ("ListAndWatch", "GetPreferredAllocation", "Allocate", "ASCEND_VISIBLE_DEVICES=")
DRA_STEPS = (
    "publish ResourceSlices",
    "allocates a claim",
    "NodePrepareResources",
    '"cdiVersion": "0.5.0"',
    *(f'"path": "/dev/{node}"' for node in ("davinci_manager", "devmm_svm", "hisi_hdc")),  # a real node's /dev
    "NodeUnprepareResources",
    "CDI spec removed: True",
)


@functools.cache
def simulate(*args: str) -> subprocess.CompletedProcess[str]:
    """One run per distinct command line, shared by the tests that look at it (each run starts and
    stops a whole simulated node: seconds apiece, 27 runs in this file without sharing)."""
    return subprocess.run(
        [sys.executable, "-m", "npu_plugin", "simulate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )


DEFAULTS = ("both", "atlas-800t-a2")  # simulate without --mode or --fake-profile


def walk(mode: str, profile: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """`simulate` for this mode and profile, spelled one way, so tests asking for the same walk share
    its run; the defaults are left to simulate (test_default_is_both_mode... proves what they are)."""
    chosen = () if (mode, profile) == DEFAULTS else ("--mode", mode, "--fake-profile", profile)
    return simulate(*chosen, *extra)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("mode", MODES)
def test_every_step_succeeds(mode: str, profile: str) -> None:
    run = walk(mode, profile)
    assert run.returncode == 0, run.stdout + run.stderr
    expected = ("discover", "register with the kubelet", "health fault", "recovery", "clean up")
    expected += DP_STEPS if mode != "dra" else ()
    expected += DRA_STEPS if mode != "device-plugin" else ()
    for text in expected:
        assert text in run.stdout, f"missing {text!r} in:\n{run.stdout}"
    assert "every step succeeded" in run.stdout


def test_default_is_both_mode_with_the_upper_half_to_dra() -> None:
    run = simulate()
    assert run.returncode == 0, run.stderr
    assert "8 NPUs (both mode)" in run.stdout
    assert "4 devices: npu-4, npu-5, npu-6, npu-7" in run.stdout
    assert "Ascend910-4" not in run.stdout.split("[4]")[0]  # the device plugin lists only its own share


def test_temporary_directories_are_removed(short_dir: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "npu_plugin", "simulate", "--mode", "dra"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"TMPDIR": str(short_dir), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr
    assert list(short_dir.iterdir()) == []


def test_a_temporary_directory_too_deep_for_sockets_is_named(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    run = subprocess.run(
        [sys.executable, "-m", "npu_plugin", "simulate", "--mode", "device-plugin"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"TMPDIR": str(deep), "PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 1
    assert "Unix sockets allow 107: choose a shorter directory" in run.stderr
    assert "Traceback" not in run.stderr


def test_a_failing_step_exits_1_naming_it(tmp_path: Path) -> None:
    inventory = tmp_path / "broken.yaml"
    inventory.write_text("devices:\n  - {physicalId: 0, chipName: 910B3, health: Critical}\n")
    run = simulate("--mode", "device-plugin", "--fake-inventory", str(inventory))
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "npu-plugin simulate: step 3 (ListAndWatch: what the device plugin offers) failed: "
        "the device plugin offers no healthy NPU to allocate"
    )
    assert "Traceback" not in run.stderr


def test_a_bad_partition_is_a_usage_error() -> None:
    run = simulate("--mode", "both", "--dra-devices", "9")
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "npu-plugin simulate: error: --dra-devices: 9 names no device of the simulated node "
        "(devices: [0, 1, 2, 3, 4, 5, 6, 7])"
    )


VNPU_STEPS = (
    "vNPU counters and candidates published",
    "counter set npu-",
    "candidates vir05_1c_16g:",
    "allocates a vnpu.npu.huawei.com claim for one vir05_1c_16g",
    "NodePrepareResources: the vNPU is created",
    "ASCEND_RUNTIME_OPTIONS=VIRTUAL",
    "NodeUnprepareResources: the vNPU is destroyed",
    "vNPUs left: 0; vdavinci nodes left: none",
)


@pytest.mark.parametrize("mode", ["dra", "both"])
def test_vnpu_dynamic_creates_and_destroys_a_vnpu(mode: str) -> None:
    run = walk(mode, "atlas-800t-a2", "--vnpu", "dynamic")
    assert run.returncode == 0, run.stdout + run.stderr
    for text in (*DRA_STEPS, *VNPU_STEPS, "health fault", "recovery", "every step succeeded"):
        assert text in run.stdout, f"missing {text!r} in:\n{run.stdout}"
    # The whole-NPU claim stays on whole NPUs with candidates published beside them; the vNPU claim
    # gets one.
    assert re.search(r"request npu: npu.huawei.com pool sim-node device npu-\d+\n", run.stdout)
    chip = re.search(r"request vnpu: npu.huawei.com pool sim-node device npu-(\d+)-vir05-1c-16g-\d+\n", run.stdout)
    assert chip is not None, run.stdout
    created = re.search(
        rf"vNPU (\d+) \(vir05_1c_16g\) on npu-{chip[1]}: \S+/dev/vdavinci(\d+) exists: True", run.stdout
    )
    assert created is not None and created[1] == created[2], run.stdout
    assert f'"ASCEND_VISIBLE_DEVICES={created[1]}"' in run.stdout
    assert f'"path": "/dev/davinci{created[1]}"' in run.stdout


# The template each profile's first chip split on demand offers first (fewest AI cores), or why none is.
ON_DEMAND = {
    "atlas-800t-a2": "vir05_1c_16g",
    "atlas-300i-pro": "vir01",
    "atlas-800-9000": "Ascend 910 (910A) supports static vNPUs only",
    "atlas-300i-duo": "Atlas 300I Duo (two 310P dies per card) supports static vNPUs only",
}


@pytest.mark.parametrize("mode", ["dra", "both"])
@pytest.mark.parametrize("profile", sorted(ON_DEMAND))
def test_vnpu_dynamic_walks_every_profile(profile: str, mode: str) -> None:
    """A template the profile has, or a step saying the product makes no vNPUs on demand; a clean shutdown."""
    run = walk(mode, profile, "--vnpu", "dynamic")
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stderr == "", run.stderr  # no watchdog thread error, no traceback
    assert "every step succeeded" in run.stdout
    expected = ON_DEMAND[profile]
    if expected.startswith("vir"):
        assert f"allocates a vnpu.npu.huawei.com claim for one {expected}" in run.stdout, run.stdout
        assert "vNPUs left: 0; vdavinci nodes left: none" in run.stdout
    else:
        assert f"no vNPUs on demand on this node: {expected}; the vNPU steps are skipped" in run.stdout, run.stdout
        assert "NodePrepareResources: the vNPU is created" not in run.stdout


def test_vnpu_off_walks_no_vnpu_step() -> None:
    run = walk("dra", "atlas-800t-a2")
    assert run.returncode == 0, run.stderr
    assert "vNPU" not in run.stdout and "vir05" not in run.stdout


def test_vnpu_dynamic_with_the_device_plugin_alone_is_a_usage_error() -> None:
    run = simulate("--mode", "device-plugin", "--vnpu", "dynamic")
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "npu-plugin simulate: error: --vnpu dynamic needs DRA (--mode dra or both); --mode device-plugin serves "
        "existing vNPUs only (--vnpu static)"
    )
    assert run.stdout == ""


def test_vnpu_without_cel_python_is_named_before_anything_starts() -> None:
    # An installation without the dev extras: celpy cannot be imported.
    code = "import sys; sys.modules['celpy'] = None; from npu_plugin.cli.main import main; sys.exit(main(sys.argv[1:]))"
    run = subprocess.run(
        [sys.executable, "-c", code, "simulate", "--mode", "dra", "--vnpu", "dynamic"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 1
    assert run.stderr.strip() == (
        "npu-plugin simulate: error: --vnpu dynamic: the scheduler stand-in evaluates the DeviceClasses' CEL with "
        "cel-python, which is not installed: install the dev extras (pip install -e '.[dev]')"
    )
    assert run.stdout == ""


@pytest.mark.parametrize("mode", MODES)
def test_share_walks_two_pods_on_one_npu(mode: str) -> None:
    run = simulate("--mode", mode, "--fake-profile", "atlas-300i-duo", "--share")
    assert run.returncode == 0, run.stdout + run.stderr
    if mode != "dra":
        chip = 1 if mode == "both" else 3
        assert f"pod-a gets Ascend310P-{chip}-share-0: ASCEND_VISIBLE_DEVICES={chip}" in run.stdout
        assert f"pod-b gets Ascend310P-{chip}-share-1: ASCEND_VISIBLE_DEVICES={chip}" in run.stdout
    if mode != "device-plugin":
        shares = re.findall(r"pod-[ab]-claim: npu-3 share ([0-9a-f-]{36})", run.stdout)
        assert len(set(shares)) == 2, run.stdout
        assert "pod-b-claim still prepared: True" in run.stdout
    assert "every step succeeded" in run.stdout
