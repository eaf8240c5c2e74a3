"""Property: whatever the interleaving of allocations, claims, releases, health changes, vNPUs an
administrator makes or removes, and restarts with new partitions, no NPU is held by both APIs or
offered by both at once, and a chip with any vNPU is offered whole by neither.

Drives the real pieces: Inventory, the device plugin's Allocate checks and ListAndWatch lists (whole
NPUs and vNPU resources), the PodResources mapping of what containers hold, the DRA Preparer (real
checkpoint and CDI files in a temp dir) and the slice builders.
"""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from npu_plugin._proto import podresources_v1_pb2 as podresources
from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.ascend.device import Health
from npu_plugin.ascend.vnpu import Vnpu, VnpuChips, parse_dp_vnpu_id
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.config import Mode, UnhealthyPolicy
from npu_plugin.deviceplugin.listing import Listing, virtual_devices
from npu_plugin.deviceplugin.service import allocatable_ids, list_response
from npu_plugin.deviceplugin.vnpu_service import allocatable_vnpu, vnpu_list_response
from npu_plugin.dra.checkpoint import CheckpointStore
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.preparer import Preparer
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.vnpu_slices import Layout, vnpu_slice_contents
from npu_plugin.errors import AllocationError
from npu_plugin.handover.podresources import dra_chip, held_devices
from npu_plugin.inventory.ownership import Holders, Owner, Partition, initial_owners, next_owners
from npu_plugin.inventory.state import Inventory

PROFILE = profile_inventory("atlas-800t-a2")
DEVICES = PROFILE.devices
IDS = [d.physical_id for d in DEVICES]
RESOURCE = "huawei.com/Ascend910"
TEMPLATES = ("vir05_1c_16g", "vir10_3c_32g")
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
        self.containers: dict[int, tuple[str, str]] = {}  # chip -> (resource, device id) a container holds
        self.vnpus: dict[int, tuple[Vnpu, ...]] = {}  # chips an administrator split, with their vNPUs
        self.prepared: dict[str, int] = {}  # claim uid -> device
        self.podresources_readable = True
        self._start(frozenset({4, 5, 6, 7}))

    def teardown(self) -> None:
        self._dir.cleanup()

    # -- the daemon's decisions, as daemon.py makes them --

    def _holders(self) -> Holders:
        """What the daemon reads: the kubelet's PodResources answer (vNPU ids mapped to their chip)
        and the checkpoint."""
        answer = podresources.ListPodResourcesResponse()
        for pid, (resource, device_id) in sorted(self.containers.items()):
            pod = answer.pod_resources.add(name=f"pod-{pid}", namespace="default")
            pod.containers.add(name="c").devices.add(resource_name=resource, device_ids=[device_id])
        device_plugin = frozenset(held_devices(answer, RESOURCE, DRIVER)[0]) if self.podresources_readable else None
        return Holders(device_plugin=device_plugin, dra=frozenset(self.preparer.held_devices()))

    def _listing(self) -> Listing:
        return Listing(self.inventory.snapshot(), self.vnpus, tuple(virtual_devices("huawei.com", DEVICES, self.vnpus)))

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
        listing = self._listing()
        try:
            allocatable_ids(listing.snapshot, [f"Ascend910-{pid}"], "Ascend910", listing.vnpus.keys())
        except AllocationError:
            return
        self.containers[pid] = (RESOURCE, f"Ascend910-{pid}")

    @rule(pid=st.sampled_from(IDS))
    def kubelet_allocates_a_vnpu(self, pid: int) -> None:
        """A stale kubelet may ask for a vNPU it once saw, so the first id of the chip's range is
        asked for too."""
        if pid in self.containers:
            return
        listing = self._listing()
        device = next((d for d in listing.virtual if d.vnpu.physical_id == pid), None)
        resource, device_id = (
            (device.resource_name, device.device_id)
            if device
            else (RESOURCE + "-5c.1cpu.16g", f"Ascend910-5c.1cpu.16g-{pid * 16 + 100}-{pid}")
        )
        try:
            allocatable_vnpu(listing, resource, [device_id])
        except AllocationError:
            return
        self.containers[pid] = (resource, device_id)

    @rule(pid=st.sampled_from(IDS), templates=st.lists(st.sampled_from(TEMPLATES), min_size=1, max_size=2))
    def admin_splits_a_chip(self, pid: int, templates: list[str]) -> None:
        """An administrator makes vNPUs with npu-smi on a chip nothing holds (the driver refuses a
        busy one)."""
        if pid in self.vnpus or pid in self.containers or pid in self.prepared.values():
            return
        first = PROFILE.vnpu[pid].id_range[0]
        self.vnpus[pid] = tuple(Vnpu(pid, first + k, t) for k, t in enumerate(templates))

    @rule(pid=st.sampled_from(IDS))
    def admin_removes_a_chips_vnpus(self, pid: int) -> None:
        if pid in self.vnpus and pid not in self.containers:
            del self.vnpus[pid]

    @rule(pid=st.sampled_from(IDS), n=st.integers(0, 10**6))
    def kubelet_prepares(self, pid: int, n: int) -> None:
        if pid in self.vnpus:  # never published whole (the invariant), so no scheduler allocates it
            return
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
        listing = self._listing()
        whole = list_response(snapshot, self.vnpus.keys())
        dp_whole = {int(d.ID.split("-")[1]) for d in whole.devices}
        dp_vnpus = {
            parse_dp_vnpu_id(d.ID).physical_id  # type: ignore[union-attr]
            for resource in {d.resource_name for d in listing.virtual}
            for d in vnpu_list_response(listing, resource).devices
            if d.health == "Healthy"
        }
        healthy_in_law = {int(d.ID.split("-")[1]) for d in whole.devices if d.health == "Healthy"}
        settings_ = SliceSettings(DRIVER, NODE, None, UnhealthyPolicy.REMOVE)
        offered = [(v.device, v.healthy) for v in snapshot.offered_by(Owner.DRA)]
        chips = VnpuChips({p: replace(PROFILE.vnpu[p], vnpus=self.vnpus[p]) for p in self.vnpus})
        published_names = [
            d["name"] for c in vnpu_slice_contents(settings_, offered, chips, Layout.SPLIT) for d in c.devices or []
        ]
        published = {dra_chip(name) for name in published_names}
        assert not (healthy_in_law | dp_vnpus) & published, "a chip is offered by both APIs"
        assert not dp_whole & self.vnpus.keys(), "the device plugin offers a split chip whole"
        assert not {f"npu-{p}" for p in self.vnpus} & set(published_names), "DRA offers a split chip whole"
        for pid in self.vnpus.keys() & {v.physical_id for v in snapshot.offered_by(Owner.DRA) if v.healthy}:
            assert {n for n in published_names if dra_chip(n) == pid} == {
                f"npu-{pid}-vnpu-{v.vnpu_id}" for v in self.vnpus[pid]
            }, "DRA serves a split chip's vNPUs as they are"
        for pid in self.containers:
            assert snapshot.get(pid).owner is Owner.DEVICE_PLUGIN  # type: ignore[union-attr]
        for pid in claimed:
            assert snapshot.get(pid).owner is Owner.DRA  # type: ignore[union-attr]


def test_a_chip_whose_vnpu_a_container_holds_stays_with_the_device_plugin_across_a_new_partition() -> None:
    """The sequence the property needs most, spelled out: PodResources names the vNPU resource and
    id, and the chip behind it counts as held."""
    ledger = Ledger()
    try:
        ledger.admin_splits_a_chip(0, ["vir05_1c_16g"])
        ledger.kubelet_allocates_a_vnpu(0)
        assert ledger.containers == {0: ("huawei.com/Ascend910-5c.1cpu.16g", "Ascend910-5c.1cpu.16g-100-0")}
        ledger.daemon_restarts_with_a_new_partition(frozenset({0}), readable=True)
        ledger.no_device_is_held_or_offered_twice()
        assert ledger.inventory.snapshot().get(0).draining  # type: ignore[union-attr]
    finally:
        ledger.teardown()


Ledger.TestCase.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestLedger = Ledger.TestCase
