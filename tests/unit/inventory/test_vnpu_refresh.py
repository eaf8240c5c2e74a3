"""vnpu_relist.py: one read of the chips' vNPUs, shared by every listener, each told only of a
change."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

import pytest

from npu_plugin.ascend.device import Device
from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.errors import BackendError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from npu_plugin.inventory.vnpu_refresh import VnpuRelist
from tests.support.fake_devices import profile_devices

A, B = Vnpu(1, 117, "vir05_1c_16g"), Vnpu(1, 116, "vir05_1c_16g")


class Hardware:
    """What each read answers, in turn; an exception is raised instead of answered."""

    def __init__(self, *answers: Mapping[int, tuple[Vnpu, ...]] | Exception) -> None:
        self.answers, self.reads = list(answers), 0

    def read(self, _devices: Sequence[Device]) -> Mapping[int, tuple[Vnpu, ...]]:
        answer = self.answers[self.reads]
        self.reads += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def relist(hardware: Hardware) -> tuple[VnpuRelist, list[Mapping[int, tuple[Vnpu, ...]]], list[int]]:
    inventory = Inventory(profile_devices("atlas-800t-a2"), failure_threshold=1, recovery_threshold=1, owners=Owner.DRA)
    shared = VnpuRelist(inventory, hardware.read, interval=5.0)
    heard: list[Mapping[int, tuple[Vnpu, ...]]] = []
    changes: list[int] = []
    shared.on_change(heard.append)
    shared.on_change(lambda _vnpus: changes.append(hardware.reads))
    return shared, heard, changes


def test_every_listener_hears_each_change_of_one_read_and_nothing_of_an_unchanged_one() -> None:
    hardware = Hardware({}, {1: (A, B), 2: ()}, {1: (B, A)}, {})
    shared, heard, changes = relist(hardware)

    async def reads() -> None:
        for _ in range(4):
            await shared.refresh()

    asyncio.run(reads())
    assert hardware.reads == 4
    assert heard == [{1: (B, A)}, {}], "sorted by id; a chip without vNPUs is left out; the same again is no change"
    assert changes == [2, 4]
    assert shared.vnpus == {}


def test_a_failed_read_keeps_the_last_good_vnpus_and_tells_no_one(caplog: pytest.LogCaptureFixture) -> None:
    hardware = Hardware({1: (B,)}, BackendError("fake vNPU state hw.json is corrupt: not JSON"), {1: (B,)})
    shared, heard, _changes = relist(hardware)

    async def reads() -> None:
        for _ in range(3):
            await shared.refresh()

    asyncio.run(reads())
    assert heard == [{1: (B,)}] and shared.vnpus == {1: (B,)}
    assert "vNPU listing failed, keeping the last one: fake vNPU state hw.json is corrupt" in caplog.text


def test_reads_failing_again_and_again_are_logged_once_per_error_and_the_recovery_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    busy, corrupt = BackendError("DCMI busy: dcmi_create_vdevice has not returned"), BackendError("corrupt")
    hardware = Hardware(busy, busy, busy, corrupt, corrupt, {1: (B,)}, busy)
    shared, _heard, _changes = relist(hardware)
    caplog.set_level("INFO")

    async def reads() -> None:
        for _ in range(7):
            await shared.refresh()

    asyncio.run(reads())
    lines = [r.getMessage() for r in caplog.records if "vNPU listing" in r.getMessage()]
    assert lines == [
        "vNPU listing failed, keeping the last one: DCMI busy: dcmi_create_vdevice has not returned",
        "vNPU listing failed, keeping the last one: corrupt",
        "vNPU listing works again",
        "vNPU listing failed, keeping the last one: DCMI busy: dcmi_create_vdevice has not returned",
    ]
