"""Property: whatever the interleaving of allocations, claims, releases, health changes and restarts
with new partitions, no NPU is held by both APIs or offered by both at once.

Drives the real pieces: Inventory, the device plugin's Allocate checks and ListAndWatch list, the DRA
Preparer (real checkpoint and CDI files in a temp dir) and the slice builder.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from npu_plugin.config import Mode, UnhealthyPolicy
from npu_plugin.device import Health
from npu_plugin.deviceplugin.service import allocatable_ids, list_response
from npu_plugin.dra.checkpoint import CheckpointStore
from npu_plugin.dra.preparer import ClaimRef, Preparer
from npu_plugin.dra.slices import SliceSettings, slice_specs
from npu_plugin.edits import HostLayout, Injection
from npu_plugin.errors import AllocationError
from npu_plugin.inventory import Inventory
from npu_plugin.ownership import Holders, Owner, Partition, initial_owners, next_owners
from npu_plugin.profiles import profile_devices

DEVICES = profile_devices("atlas-800t-a2")
IDS = [d.physical_id for d in DEVICES]
NODE, DRIVER = "node-a", "npu.huawei.com"
LAYOUT = HostLayout(dev_root="/dev", injection=Injection.NODES, common_nodes=(), driver_mounts=())
partitions = st.frozensets(st.sampled_from(IDS))


class Ledger(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._dir = tempfile.TemporaryDirectory()
        root = Path(self._dir.name)
        (root / "cdi").mkdir()
        (root / "state").mkdir()
        self.claims: dict[str, dict[str, Any]] = {}
        self.preparer = Preparer(
            driver=DRIVER,
            pool=NODE,
            cdi_root=root / "cdi",
            state_dir=root / "state",
            layout=LAYOUT,
            store=CheckpointStore(root / "state", "boot-1"),
            snapshot=lambda: self.inventory.snapshot(),  # noqa: PLW0108 - a restart replaces it
            fetch_claim=lambda namespace, name: self.claims[name],
        )
        self.containers: dict[int, str] = {}  # device -> pod holding it through the device plugin
        self.prepared: dict[str, int] = {}  # claim uid -> device
        self.podresources_readable = True
        self._start(frozenset({4, 5, 6, 7}))

    def teardown(self) -> None:
        self._dir.cleanup()

    # -- the daemon's decisions, as daemon.py makes them --

    def _holders(self) -> Holders:
        device_plugin = frozenset(self.containers) if self.podresources_readable else None
        return Holders(device_plugin=device_plugin, dra=frozenset(self.preparer.held_devices()))

    def _start(self, dra_devices: frozenset[int]) -> None:
        self.desired = Partition(Mode.BOTH, dra_devices).owners(DEVICES)
        self.inventory = Inventory(
            DEVICES, failure_threshold=1, recovery_threshold=1, owners=self.desired, desired=self.desired
        )
        for pid, owner in initial_owners(self.desired, self._holders()).items():
            self.inventory.set_owner(pid, owner)

    # -- what the kubelet, the scheduler and the operator do --

    @rule(pid=st.sampled_from(IDS))
    def kubelet_allocates(self, pid: int) -> None:
        """The kubelet tracks its own grants; a stale one may ask for any device it once saw."""
        if pid in self.containers:
            return
        try:
            allocatable_ids(self.inventory.snapshot(), [f"Ascend910-{pid}"], "Ascend910")
        except AllocationError:
            return
        self.containers[pid] = f"pod-{pid}"

    @rule(pid=st.sampled_from(IDS), n=st.integers(0, 10**6))
    def kubelet_prepares(self, pid: int, n: int) -> None:
        uid = f"uid-{pid}-{n}"
        self.claims[uid] = {
            "metadata": {"uid": uid, "name": uid, "namespace": "default"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "npu", "driver": DRIVER, "pool": NODE, "device": f"npu-{pid}"}]}
                }
            },
        }
        result = self.preparer.prepare([ClaimRef("default", uid, uid)])[uid]
        if not result.error:
            self.prepared[uid] = pid

    @precondition(lambda self: self.prepared)
    @rule(data=st.data())
    def kubelet_unprepares(self, data: st.DataObject) -> None:
        uid = data.draw(st.sampled_from(sorted(self.prepared)))
        assert self.preparer.unprepare([ClaimRef("default", uid, uid)]) == {uid: ""}
        del self.prepared[uid]

    @precondition(lambda self: self.containers)
    @rule(data=st.data())
    def pod_ends(self, data: st.DataObject) -> None:
        del self.containers[data.draw(st.sampled_from(sorted(self.containers)))]

    @rule(pid=st.sampled_from(IDS), level=st.sampled_from(list(Health)))
    def health_changes(self, pid: int, level: Health) -> None:
        levels = {v.physical_id: v.device.health for v in self.inventory.snapshot().devices}
        self.inventory.observe(levels | {pid: level})

    @rule(readable=st.booleans())
    def handover_tick(self, readable: bool) -> None:
        self.podresources_readable = readable
        current = {v.physical_id: v.owner for v in self.inventory.snapshot().devices}
        for pid, owner in next_owners(self.desired, current, self._holders()).items():
            self.inventory.set_owner(pid, owner)

    @rule(dra_devices=partitions, readable=st.booleans())
    def daemon_restarts_with_a_new_partition(self, dra_devices: frozenset[int], readable: bool) -> None:
        self.podresources_readable = readable
        self._start(dra_devices)

    # -- the invariant --

    @invariant()
    def no_device_is_held_or_offered_twice(self) -> None:
        snapshot = self.inventory.snapshot()
        claimed = set(self.prepared.values())
        assert not claimed & set(self.containers), "a device is held by a container and a claim"
        assert len(claimed) == len(self.prepared), "two claims hold one device"
        healthy_in_law = {int(d.ID.split("-")[1]) for d in list_response(snapshot).devices if d.health == "Healthy"}
        settings_ = SliceSettings(DRIVER, NODE, None, UnhealthyPolicy.REMOVE)
        published = {
            int(d["name"].split("-")[1])
            for chunk in slice_specs(settings_, [(v.device, v.healthy) for v in snapshot.offered_by(Owner.DRA)])
            for d in chunk
        }
        assert not healthy_in_law & published, "a device is offered by both APIs"
        for pid in self.containers:
            assert snapshot.get(pid).owner is Owner.DEVICE_PLUGIN  # type: ignore[union-attr]
        for pid in claimed:
            assert snapshot.get(pid).owner is Owner.DRA  # type: ignore[union-attr]


Ledger.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLedger = Ledger.TestCase
