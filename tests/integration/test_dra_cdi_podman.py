"""A real CDI consumer: podman injects the device the DRA daemon prepared into a busybox
container."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from npu_plugin.sim.scheduler import DeviceRequest
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import Launcher
from tests.support.dra import DRIVER, Workspace, allocate, container_cdi_ids, dra_args, run_with_kubelet
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
pytestmark = pytest.mark.podman
BUSYBOX = Path("/bin/busybox")
PODMAN_OPTIONS = [
    "--runtime",
    "runc",
    "run",
    "--rm",
    "--network=none",
    "--ulimit",
    "nofile=20000:20000",
    "--ulimit",
    "nproc=32768:32768",
]


def make_rootfs(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    shutil.copy2(BUSYBOX, root / "bin" / "busybox")
    for tool in ("sh", "env", "ls", "cat"):
        (root / "bin" / tool).symlink_to("busybox")
    return root


def podman(cdi_dir: Path, rootfs: Path, *options: str, command: str) -> subprocess.CompletedProcess[str]:
    """Run a container in a private mount namespace whose /etc/cdi is `cdi_dir` (options before
    --rootfs)."""
    Path("/etc/cdi").mkdir(parents=True, exist_ok=True)
    inner = " ".join(["podman", *PODMAN_OPTIONS, *options, "--rootfs", str(rootfs), "/bin/sh", "-c", f"'{command}'"])
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {cdi_dir} /etc/cdi && {inner}"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def podman_works(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    missing = [tool for tool in ("podman", "runc", "unshare") if shutil.which(tool) is None]
    if missing or not BUSYBOX.exists() or os.geteuid() != 0:
        pytest.skip(f"podman test needs root, podman, runc, unshare and {BUSYBOX}; missing: {missing or 'root'}")
    # The mount point podman() binds over is made on the host; a host that had none gets none back.
    made_mount_point = not Path("/etc/cdi").exists()
    try:
        root = tmp_path_factory.mktemp("probe")
        (root / "cdi").mkdir()
        probe = podman(root / "cdi", make_rootfs(root / "rootfs"), command="true")
        if probe.returncode != 0:
            pytest.skip(f"podman cannot run a container here: {probe.stderr.strip()[-400:]}")
        yield
    finally:
        if made_mount_point:
            Path("/etc/cdi").rmdir()


def test_podman_injects_the_prepared_claim(
    podman_works: None, workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, tmp_path: Path
) -> None:
    assert stat.S_ISCHR((workspace.dev / "davinci0").stat().st_mode), "the fake /dev holds real char devices"
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> str:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "podman", DeviceRequest("npus", count=2))
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert answer.error == ""
        assert_valid_cdi(workspace.cdi_spec(claim.uid))
        return answer.devices[0].cdi_device_ids[0]

    cdi_id = run_with_kubelet(workspace, fake_api, scenario)
    ran = podman(workspace.cdi, make_rootfs(tmp_path / "rootfs"), "--device", cdi_id, command="env; ls -l /dev")
    assert ran.returncode == 0, ran.stderr
    assert "ASCEND_VISIBLE_DEVICES=0,1" in ran.stdout.splitlines()
    listed = {line.split()[-1] for line in ran.stdout.splitlines() if line.startswith("c")}
    assert {"davinci0", "davinci1", "davinci_manager", "devmm_svm", "hisi_hdc"} <= listed
    assert "davinci2" not in listed


def test_podman_gives_a_container_of_the_whole_claim_every_request_and_one_of_a_request_only_its_own(
    podman_works: None, workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, tmp_path: Path
) -> None:
    """A claim of two requests, injected as the kubelet hands its CDI ids over for each kind of container."""
    launch_daemon(*dra_args(workspace))

    async def scenario(kubelet: DraKubeletSimulator) -> dict[str, list[str]]:
        await kubelet.wait_for_plugin(DRIVER)
        claim = await allocate(fake_api, "two", DeviceRequest("a"), DeviceRequest("b", count=2))
        answer = (await kubelet.prepare([claim]))[claim.uid]
        assert answer.error == ""
        assert_valid_cdi(workspace.cdi_spec(claim.uid))
        return {given: container_cdi_ids(answer.devices, given) for given in ("", "a", "b")}

    given = run_with_kubelet(workspace, fake_api, scenario)
    rootfs = make_rootfs(tmp_path / "rootfs")
    seen: dict[str, tuple[set[str], set[str]]] = {}
    for name, cdi_ids in given.items():
        options = [option for cdi_id in cdi_ids for option in ("--device", cdi_id)]
        ran = podman(workspace.cdi, rootfs, *options, command="echo ids=$ASCEND_VISIBLE_DEVICES; ls /dev")
        assert ran.returncode == 0, ran.stderr
        [ids] = [line.removeprefix("ids=") for line in ran.stdout.splitlines() if line.startswith("ids=")]
        nodes = {n.removeprefix("davinci") for n in ran.stdout.split() if n.removeprefix("davinci").isdigit()}
        seen[name] = (set(ids.split(",")), nodes)
    whole, a, b = seen[""], seen["a"], seen["b"]
    assert all(visible == nodes for visible, nodes in seen.values()), seen
    assert (len(a[0]), len(b[0])) == (1, 2), seen
    assert whole[0] == a[0] | b[0], seen
