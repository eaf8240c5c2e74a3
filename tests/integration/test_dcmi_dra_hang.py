"""A hung dcmi_create_vdevice against a real daemon (`serve --mode dra --backend dcmi --vnpu
dynamic` on the fake libdcmi.so), the fake API and the DRA kubelet simulator: the hung claim gets
its own error in time, the daemon keeps answering (a whole-NPU claim on the other chip is told the
library is busy, within the call), and once the create returns the whole-NPU claim prepares without
a restart."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_plugin.backends.dcmi import backend as dcmi_backend
from npu_plugin.sim.dra_kubelet import DraKubeletSimulator
from tests.integration.test_dcmi_vnpu import B3_TOTALS, VIR05, VIR10
from tests.integration.test_dra_vnpu_prepare import vnpu_claim
from tests.support.daemon import Launcher
from tests.support.dra import (
    Workspace,
    async_wait_until,
    dra_args,
    plant_claim,
    published_names,
    result,
    retry_prepare,
    run_with_kubelet,
)
from tests.support.fake_hardware import FakeDie, FakeHost, npu_smi_for
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
# The test client's gRPC deadline, short so the test is quick; the daemon answers 2 s before it.
DEADLINE_SECONDS = 6.0
HUNG = "creating vNPU vir05_1c_16g on npu-0 (id 100): the driver did not answer within"
BUSY = "DCMI busy: dcmi_create_vdevice on npu-0 has not returned for"


@pytest.fixture
def dcmi_args(
    workspace: Workspace, fake_builds: dict[str, Path], config_path: Path, hung_create: Path, tmp_path: Path
) -> list[str]:
    """The workspace's DRA daemon, --vnpu dynamic, on the fake libdcmi.so simulating two 910B3 dies
    (physical ids 0 and 1, one per card) whose creates hang, with a fake npu-smi for the
    templates."""
    host = FakeHost(
        [FakeDie(card=card, dev=0, logic=card, phy=card) for card in (0, 1)],
        vnpu_mode=0,
        vnpu_totals={0: B3_TOTALS, 1: B3_TOTALS},
        vnpu_templates=[VIR10, VIR05],
        hang=("dcmi_create_vdevice", hung_create),
    )
    host.write(config_path)
    npu_smi = npu_smi_for(tmp_path / "npu-smi", host)
    args = dra_args(workspace, "--vnpu", "dynamic")
    at = args.index("--backend")  # replaces --backend fake --fake-inventory <file>
    library = fake_builds["current"]
    return [*args[:at], "--backend", "dcmi", "--dcmi-library", str(library), "--npu-smi", str(npu_smi), *args[at + 4 :]]


def test_a_whole_npu_claim_is_answered_while_a_dcmi_create_hangs_and_prepares_once_it_returns(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher, dcmi_args: list[str], hung_create: Path
) -> None:
    hung = vnpu_claim(fake_api, "hung", "npu-0-vir05-1c-16g-0")
    whole = plant_claim(fake_api, "whole", None, [result("npu-1")])

    async def scenario(kubelet: DraKubeletSimulator) -> None:
        daemon = launch_daemon(*dcmi_args, constants={f"{dcmi_backend.__name__}.DEFAULT_LOCK_TIMEOUT_SECONDS": 3.0})
        await kubelet.wait_for(lambda: any(a.registered for a in kubelet.attempts), timeout=20)
        await async_wait_until(lambda: "npu-1" in published_names(fake_api), what="npu-1 published")
        # The hung claim's own error, within its call.
        assert HUNG in (await kubelet.prepare([hung], timeout=DEADLINE_SECONDS))[hung.uid].error
        # Health sampling finds the create overdue after the DCMI lock timeout (15 s; 3 s here, no flag
        # sets it) and says so once ...
        await async_wait_until(lambda: BUSY in daemon.log(), timeout=30, what="the hung create reported")
        # ... and from then on a claim on the other chip is told at once, within its call, instead
        # of waiting.
        answer = (await kubelet.prepare([whole], timeout=DEADLINE_SECONDS))[whole.uid]
        assert BUSY in answer.error
        # The driver answers at last: the library answers again and the claim prepares, with no
        # restart.
        hung_create.unlink()
        await async_wait_until(lambda: "returned after" in daemon.log(), what="the create's return logged")
        assert (await retry_prepare(kubelet, [whole]))[whole.uid].error == ""

    run_with_kubelet(workspace, fake_api, scenario)
