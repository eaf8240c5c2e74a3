"""dra/preparer.py with vNPUs, in process: the fake backend's simulated hardware (a real state file
and real vdavinci files), claims from a dict, a temporary state dir and CDI root."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.ascend.vnpu import Vnpu, VnpuMode, VnpuOrigin
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.dra.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    CheckpointStore,
    ClaimEntry,
    PreparedDevice,
    VnpuRecord,
)
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.preparer import Preparer
from npu_plugin.dra.vnpus import VnpuOperations
from npu_plugin.errors import BackendError, VnpuError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from npu_plugin.inventory.vnpu_plans import VnpuReader
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.daemon import wait_until
from tests.unit.dra.test_preparer import DRIVER, POOL, Claims, ours

V05 = "vir05_1c_16g"


class Node:
    """A node (an 8-chip Atlas 800T A2 unless told) with its simulated vNPU hardware, and a preparer
    serving it (--vnpu dynamic unless told)."""

    def __init__(
        self,
        root: Path,
        backend: VnpuBackend | None = None,
        profile: str = "atlas-800t-a2",
        mode: VnpuMode = VnpuMode.DYNAMIC,
    ) -> None:
        self.root, self.hw, self.dev, self.cdi = root, root / "hw.json", root / "dev", root / "cdi"
        self.state = root / "state"
        for directory in (self.state, self.cdi, self.dev):
            directory.mkdir(exist_ok=True)
        self.mode = mode
        self.fake = FakeBackend(profile=profile, vnpu_state=self.hw, dev_root=self.dev)
        self.backend: VnpuBackend = backend or self.fake
        self.claims = Claims()
        self.operations: list[tuple[str, str]] = []  # what the metrics hear
        self.vnpus_changed = 0  # what the publisher hears from outside Prepare and Unprepare calls
        self.preparer = self.make_preparer()

    def make_preparer(self) -> Preparer:
        devices = self.fake.discover()
        owners = {d.physical_id: Owner.DRA for d in devices}
        inventory = Inventory(devices, failure_threshold=1, recovery_threshold=1, owners=owners)
        reader = VnpuReader(self.backend, self.mode)
        operations = VnpuOperations(
            self.backend,
            reader,
            self.dev,
            node_wait_seconds=0.5,
            sleep=lambda _s: None,
            on_operation=lambda op, result, _seconds: self.operations.append((op, result)),
        )
        return Preparer(
            driver=DRIVER,
            pool=POOL,
            cdi_root=self.cdi,
            state_dir=self.state,
            layout=HostLayout(str(self.dev), Injection.NODES, ("davinci_manager",), ()),
            store=CheckpointStore(self.state, "boot"),
            snapshot=inventory.snapshot,
            fetch_claim=self.claims.fetch,
            vnpus=operations,
            on_vnpus_changed=self._note_change,
        )

    def _note_change(self) -> None:
        self.vnpus_changed += 1

    def hardware(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.hw.read_text())
        return document

    def set_hardware(self, **changes: Any) -> None:
        self.fake.list_vnpus(0)  # the state file exists from the first vNPU call on
        self.hw.write_text(json.dumps(self.hardware() | changes))

    def vnpus(self) -> dict[str, list[dict[str, Any]]]:
        return {chip: held for chip, held in self.hardware()["vnpus"].items() if held}

    def nodes(self) -> list[str]:
        return sorted(p.name for p in self.dev.glob("vdavinci*"))

    def checkpoint(self) -> dict[str, Any]:
        claims: dict[str, Any] = json.loads((self.state / "checkpoint.json").read_text())["claims"]
        return claims

    def spec(self, uid: str) -> dict[str, Any]:
        spec: dict[str, Any] = json.loads((self.cdi / f"{DRIVER}-claim_{uid}.json").read_text())
        return spec

    def claim(self, uid: str, *devices: str, request: str = "vnpu") -> ClaimRef:
        return self.claims.add(f"c-{uid}", uid, [ours(d, request) for d in devices])

    def prepare(self, *refs: ClaimRef) -> dict[str, str]:
        """Each claim's error ("" when prepared)."""
        return {uid: result.error for uid, result in self.preparer.prepare(refs).items()}


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_prepare_creates_the_vnpu_records_it_and_writes_its_cdi_spec(node: Node) -> None:
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    results = node.preparer.prepare([ref])
    assert results["u1"].error == ""
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}
    assert node.nodes() == ["vdavinci100"]
    spec = node.spec("u1")
    assert_valid_cdi(spec)
    edits = spec["devices"][0]["containerEdits"]
    assert edits["env"] == ["ASCEND_VISIBLE_DEVICES=100", "ASCEND_RUNTIME_OPTIONS=VIRTUAL"]
    assert edits["deviceNodes"][0] == {
        "path": "/dev/davinci100",
        "hostPath": f"{node.dev}/vdavinci100",
        "permissions": "rw",
    }
    assert [n["path"] for n in edits["deviceNodes"]] == ["/dev/davinci100", "/dev/davinci_manager"]
    assert "ASCEND_VNPU_SPECS" not in json.dumps(spec)
    entry = node.checkpoint()["u1"]
    assert entry["state"] == "PrepareCompleted"
    assert entry["devices"][0]["vnpu"] == {"physicalId": 0, "template": V05, "vnpuId": 100, "origin": "dynamic"}
    assert results["u1"].devices[0].device_name == "npu-0-vir05-1c-16g-0"


def test_a_second_prepare_answers_the_same_and_creates_nothing(node: Node) -> None:
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    first = node.preparer.prepare([ref])
    assert node.preparer.prepare([ref]) == first
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}


def test_ids_are_the_lowest_free_of_the_chips_range(node: Node) -> None:
    refs = [
        node.claim("u1", "npu-0-vir05-1c-16g-0"),
        node.claim("u2", "npu-0-vir05-1c-16g-1"),
        node.claim("u3", "npu-4-vir10-3c-32g-0"),
    ]
    assert node.prepare(*refs) == {"u1": "", "u2": "", "u3": ""}
    assert node.vnpus() == {
        "0": [{"vnpuId": 100, "template": V05}, {"vnpuId": 101, "template": V05}],
        "4": [{"vnpuId": 164, "template": "vir10_3c_32g"}],
    }


def test_unprepare_destroys_the_vnpu_then_forgets_the_claim(node: Node) -> None:
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    node.prepare(ref)
    assert node.preparer.unprepare([ref]) == {"u1": ""}
    assert node.vnpus() == {} and node.nodes() == []
    assert node.checkpoint() == {} and list(node.cdi.iterdir()) == []
    assert node.preparer.unprepare([ref]) == {"u1": ""}


def test_a_failed_create_fails_its_claim_alone_and_leaves_nothing(node: Node) -> None:
    node.set_hardware(faults={"createError": -8005})
    errors = node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0"), node.claim("u2", "npu-1-vir05-1c-16g-0"))
    assert "creating vNPU vir05_1c_16g on npu-0 (id 100) failed:" in errors["u1"] and "-8005" in errors["u1"]
    assert errors["u2"] == ""
    assert node.vnpus() == {"1": [{"vnpuId": 116, "template": V05}]}
    assert list(node.checkpoint()) == ["u2"]
    assert [p.name for p in node.cdi.iterdir()] == [f"{DRIVER}-claim_u2.json"]


def test_a_vnpu_in_use_keeps_its_claim_until_a_destroy_succeeds(node: Node) -> None:
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    node.prepare(ref)
    node.set_hardware(faults={"destroyBusy": 6})  # two Unprepares of three tries each
    for _ in range(2):
        error = node.preparer.unprepare([ref])["u1"]
        assert "destroying vNPU 100 (vir05_1c_16g) on npu-0 failed" in error and "-8020" in error
        assert list(node.checkpoint()) == ["u1"]
        # Meanwhile the vNPU still counts: the whole chip is not handed out.
        refused = node.prepare(node.claim("w", "npu-0", request="npu"))["w"]
        assert "overlapping allocation on npu-0" in refused and "DRAPartitionableDevices" in refused
    assert node.preparer.unprepare([ref]) == {"u1": ""}
    assert node.vnpus() == {} and node.checkpoint() == {}


class RacingBackend:
    """The fake backend, with an administrator who takes the id we are about to use just before our
    create."""

    def __init__(self, inner: FakeBackend) -> None:
        self.inner, self.raced = inner, False

    def chip_vnpu(self, physical_id: int) -> Any:
        return self.inner.chip_vnpu(physical_id)

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        return self.inner.list_vnpus(physical_id)

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        if not self.raced:
            self.raced = True
            self.inner.create_vnpu(physical_id, template, vnpu_id)
        return self.inner.create_vnpu(physical_id, template, vnpu_id)

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        self.inner.destroy_vnpu(physical_id, vnpu_id)


def test_an_id_taken_meanwhile_moves_the_claim_to_the_next_free_id(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node = Node(tmp_path, RacingBackend(node.fake))
    assert node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0")) == {"u1": ""}
    assert [v["vnpuId"] for v in node.vnpus()["0"]] == [100, 101]
    assert node.checkpoint()["u1"]["devices"][0]["vnpu"]["vnpuId"] == 101
    assert node.spec("u1")["devices"][0]["containerEdits"]["env"][0] == "ASCEND_VISIBLE_DEVICES=101"


def test_a_prepared_claim_whose_vnpu_vanished_gets_it_again_with_its_id(node: Node) -> None:
    """A reboot with the driver's recovery off: the kubelet prepares again before starting
    containers."""
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    first = node.preparer.prepare([ref])
    node.set_hardware(vnpus={})
    (node.dev / "vdavinci100").unlink()
    assert node.preparer.prepare([ref]) == first
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]} and node.nodes() == ["vdavinci100"]


def test_a_whole_npu_and_a_vnpu_of_one_chip_exclude_each_other(node: Node) -> None:
    node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0"))
    assert "overlapping allocation on npu-0" in node.prepare(node.claim("w0", "npu-0", request="npu"))["w0"]
    assert node.prepare(node.claim("w2", "npu-2", request="npu")) == {"w2": ""}
    assert "overlapping allocation on npu-2" in node.prepare(node.claim("v2", "npu-2-vir05-1c-16g-0"))["v2"]


def test_start_up_destroys_the_vnpus_of_interrupted_claims_and_keeps_the_others(node: Node) -> None:
    node.prepare(node.claim("kept", "npu-1-vir05-1c-16g-0"))
    node.fake.create_vnpu(0, V05, 100)  # made by a Prepare killed before it recorded completion
    record_claim(node, "lost", PREPARE_STARTED, V05)
    node.make_preparer().collect_garbage()
    assert node.vnpus() == {"1": [{"vnpuId": 116, "template": V05}]}
    assert list(node.checkpoint()) == ["kept"]


def test_foreign_vnpus_are_never_destroyed_and_their_chip_serves_them_as_they_are(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    node.set_hardware(vnpus={"0": [{"vnpuId": 102, "template": V05}]})
    node.preparer.collect_garbage()
    assert node.vnpus() == {"0": [{"vnpuId": 102, "template": V05}]}
    assert any("npu-0 holds vNPUs not created by npu-plugin (102)" in r.getMessage() for r in caplog.records)
    refused = node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0"))["u1"]
    assert "npu-0 is not split on demand" in refused
    assert "not offered whole" in node.prepare(node.claim("w", "npu-0", request="npu"))["w"]
    # The static name: Prepare only writes the CDI spec, Unprepare never destroys.
    static = node.claim("s", "npu-0-vnpu-102")
    assert node.prepare(static) == {"s": ""}
    assert node.checkpoint()["s"]["devices"][0]["vnpu"]["origin"] == "static"
    assert node.spec("s")["devices"][0]["containerEdits"]["env"][0] == "ASCEND_VISIBLE_DEVICES=102"
    assert node.preparer.unprepare([static]) == {"s": ""}
    assert node.vnpus() == {"0": [{"vnpuId": 102, "template": V05}]}


@pytest.mark.parametrize(
    ("profile", "mode", "template"),
    [
        ("atlas-300i-duo", VnpuMode.DYNAMIC, "vir01"),  # static only: two 310P dies per card
        ("atlas-800-9000", VnpuMode.DYNAMIC, "vir02"),  # static only: 910A
        ("atlas-800t-a2", VnpuMode.STATIC, V05),
    ],
)
def test_a_chip_served_as_it_is_holds_no_foreign_vnpus(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, profile: str, mode: VnpuMode, template: str
) -> None:
    node = Node(tmp_path, profile=profile, mode=mode)
    node.set_hardware(vnpus={"1": [{"vnpuId": 116, "template": template}]})
    node.preparer.collect_garbage()
    assert node.vnpus() == {"1": [{"vnpuId": 116, "template": template}]}
    assert not [r.getMessage() for r in caplog.records if "not created by npu-plugin" in r.getMessage()]
    static = node.claim("s", "npu-1-vnpu-116")
    assert node.prepare(static) == {"s": ""}
    assert node.checkpoint()["s"]["devices"][0]["vnpu"]["origin"] == "static"


def test_each_create_and_destroy_is_counted_and_a_refused_mix_is_told_apart(
    node: Node, caplog: pytest.LogCaptureFixture
) -> None:
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    node.prepare(ref)
    node.set_hardware(vnpus=node.hardware()["vnpus"], faults={"createError": -8005, "destroyBusy": 1})
    node.prepare(node.claim("u2", "npu-1-vir05-1c-16g-0"))
    assert node.preparer.unprepare([ref]) == {"u1": ""}
    node.set_hardware(vnpus=node.hardware()["vnpus"], faults={"createError": -8002})
    node.prepare(node.claim("u3", "npu-1-vir05-1c-16g-0"))
    assert node.operations == [
        ("create", "success"),
        ("create", "refused"),
        ("destroy", "refused"),
        ("destroy", "success"),
        ("create", "refused"),
    ]
    assert sum("hardware refused a template mix the counters allow" in r.getMessage() for r in caplog.records) == 1


class BrokenTool(RacingBackend):
    """The fake backend whose create cannot even be called (npu-smi missing, say)."""

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        raise BackendError("npu-smi: command not found")


def test_a_create_that_cannot_be_called_is_an_error_of_its_claim_and_counted_as_one(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node = Node(tmp_path, BrokenTool(node.fake))
    error = node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0"))["u1"]
    assert "creating vNPU vir05_1c_16g on npu-0 (id 100) failed: npu-smi: command not found" in error
    assert node.operations == [("create", "error")]
    assert node.checkpoint() == {}


class RefusingChipOne(RacingBackend):
    """The fake backend whose driver refuses every create on chip 1 (a hardware rule the counters do
    not model)."""

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        if physical_id == 1:
            raise VnpuError(-8005, f"create vNPU {template} id {vnpu_id} on npu-1")
        return self.inner.create_vnpu(physical_id, template, vnpu_id)


def test_a_refused_create_destroys_the_vnpus_its_claim_already_made(tmp_path: Path) -> None:
    node = Node(tmp_path)
    node = Node(tmp_path, RefusingChipOne(node.fake))
    two = node.claims.add("c-u1", "u1", [ours("npu-0-vir05-1c-16g-0", "a"), ours("npu-1-vir05-1c-16g-0", "b")])
    error = node.prepare(two)["u1"]
    assert "creating vNPU vir05_1c_16g on npu-1 (id 116) failed:" in error and "-8005" in error, error
    # The vNPU of request 'a' was made first and is gone again: nothing on the device, nothing
    # recorded.
    assert node.operations == [("create", "success"), ("create", "refused"), ("destroy", "success")]
    assert node.vnpus() == {} and node.nodes() == []
    assert node.checkpoint() == {} and list(node.cdi.iterdir()) == []
    # Its id was released with it.
    assert node.prepare(node.claim("u2", "npu-0-vir05-1c-16g-0")) == {"u2": ""}
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}


def record_claim(node: Node, uid: str, state: str, template: str, vnpu_id: int = 100) -> None:
    """A checkpoint entry as a crash (or another template) left it, for a vNPU on chip 0."""
    store = CheckpointStore(node.state, "boot")
    checkpoint = store.load()
    record = VnpuRecord(0, template, vnpu_id, VnpuOrigin.DYNAMIC)
    device = PreparedDevice(("vnpu",), POOL, f"npu-0-{template.replace('_', '-')}-0", 0, (), record)
    checkpoint.claims[uid] = ClaimEntry("ns", f"c-{uid}", state, (device,))
    store.save(checkpoint)


def test_an_interrupted_claims_vnpu_that_cannot_be_destroyed_keeps_its_record_until_it_can(node: Node) -> None:
    node.fake.create_vnpu(0, V05, 100)
    record_claim(node, "u1", PREPARE_STARTED, V05)
    node.set_hardware(vnpus=node.hardware()["vnpus"], faults={"destroyBusy": 6})
    node.make_preparer().collect_garbage()
    assert node.checkpoint()["u1"]["state"] == "PrepareStarted"
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    assert "an interrupted Prepare of this claim made cannot be destroyed yet" in node.prepare(ref)["u1"]
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}
    assert node.prepare(ref) == {"u1": ""}  # busy no more: the old vNPU goes, a new one comes
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}
    assert node.checkpoint()["u1"]["state"] == "PrepareCompleted"


def test_a_recorded_vnpu_with_another_template_is_foreign(node: Node, caplog: pytest.LogCaptureFixture) -> None:
    node.fake.create_vnpu(0, V05, 100)
    record_claim(node, "u1", PREPARE_COMPLETED, "vir10_3c_32g")
    preparer = node.make_preparer()
    preparer.collect_garbage()
    assert any(
        "vNPU 100 on npu-0 is a vir05_1c_16g, but claim u1 recorded a vir10_3c_32g" in r.getMessage()
        for r in caplog.records
    )
    assert preparer.own_vnpu_ids() == frozenset()
    node.preparer = preparer
    assert "npu-0 is not split on demand" in node.prepare(node.claim("u2", "npu-0-vir05-1c-16g-1"))["u2"]
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}


def test_a_hung_create_fails_its_claim_in_time_and_the_claim_is_released_when_the_create_returns(node: Node) -> None:
    hung = node.claim("u1", "npu-0-vir05-1c-16g-0")
    whole = node.claim("w1", "npu-1", request="npu")
    node.set_hardware(faults={"hangCreate": True})
    try:
        # No time left before the deadline: the create still gets the minimum wait, then its claim
        # an answer.
        results = node.preparer.prepare([hung, whole], deadline=time.monotonic())
        assert (
            "claim ns/c-u1: creating vNPU vir05_1c_16g on npu-0 (id 100): the driver did not answer within 1.0s"
            in results["u1"].error
        )
        assert results["w1"].error == ""  # the rest of the batch goes on
        # The record stays: the vNPU the create is making counts as used, and its id stays reserved.
        entry = node.checkpoint()["u1"]
        assert entry["state"] == "PrepareStarted"
        assert entry["devices"][0]["vnpu"] == {"physicalId": 0, "template": V05, "vnpuId": 100, "origin": "dynamic"}
        assert "overlapping allocation on npu-0" in node.prepare(node.claim("w0", "npu-0", request="npu"))["w0"]
        # Neither a retry nor an Unprepare races the running create.
        still = "vNPU vir05_1c_16g on npu-0 (id 100) is still being created: the driver has not answered for"
        assert still in node.prepare(hung)["u1"]
        assert still in node.preparer.unprepare([hung])["u1"]
        assert node.checkpoint()["u1"]["state"] == "PrepareStarted"
        assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}
        assert node.preparer.unprepare([whole]) == {"w1": ""}  # and other claims come and go
        assert node.vnpus_changed == 0
    finally:
        node.set_hardware(faults={})  # the driver answers at last
    # Released as start-up releases an interrupted Prepare: the vNPU destroyed, the entry dropped.
    wait_until(lambda: node.vnpus_changed == 1, 30, "the late create to be settled")
    assert "u1" not in node.checkpoint()
    assert node.vnpus() == {} and node.nodes() == []
    assert node.operations == [("create", "success"), ("destroy", "success")]
    assert node.prepare(hung) == {"u1": ""}
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}


def test_a_late_create_of_a_prepared_claims_vnpu_keeps_it(node: Node) -> None:
    """After a reboot without recovery the kubelet prepares a completed claim again, which
    re-creates its vNPU."""
    ref = node.claim("u1", "npu-0-vir05-1c-16g-0")
    first = node.preparer.prepare([ref])
    node.set_hardware(vnpus={}, faults={"hangCreate": True})
    (node.dev / "vdavinci100").unlink()
    try:
        assert "the driver did not answer within" in node.preparer.prepare([ref], deadline=time.monotonic())["u1"].error
        assert "still being created" in node.prepare(ref)["u1"]
    finally:
        node.set_hardware(faults={})
    wait_until(
        lambda: node.preparer.vnpus is not None and node.preparer.vnpus.creating_since(100) is None, 30, "the create"
    )
    assert node.checkpoint()["u1"]["state"] == "PrepareCompleted" and node.vnpus_changed == 0
    assert node.preparer.prepare([ref]) == first
    assert node.vnpus() == {"0": [{"vnpuId": 100, "template": V05}]}


def test_the_publishers_reads_of_the_checkpoint_do_not_wait_on_the_state_lock(node: Node) -> None:
    """A Prepare holds the state lock while it waits on the driver; what the slices need must not
    wait for it."""
    node.prepare(node.claim("u1", "npu-0-vir05-1c-16g-0"), node.claim("w2", "npu-2", request="npu"))
    with ThreadPoolExecutor(max_workers=1) as pool, node.preparer.state.locked():
        assert pool.submit(node.preparer.own_vnpu_ids).result(timeout=30) == frozenset({100})
        assert pool.submit(node.preparer.held_devices).result(timeout=30) == {0, 2}
