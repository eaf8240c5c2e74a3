"""The fake backend's simulated vNPU hardware: the driver's rules and codes against a real state
file and a real dev root, the fault knobs, reboots, and a corrupt state file."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.fake.vnpu_hardware import HardwareState, parse_state, render_state
from npu_plugin.errors import VnpuError, VnpuNotFoundError
from npu_plugin.host.boot import read_boot_id
from npu_plugin.host.fswatch import DirectoryWatch
from tests.support.daemon import REPO, wait_until

INVENTORY = """devices:
  - physicalId: 0
    chipName: 910B3
    vnpu:
      resources: {aicore: 20, aicpu: 7, vpc: 9, venc: 0, vdec: 2, jpegd: 24, jpege: 4}
      templates:
        - {name: vir05_1c_16g, aicore: 5, memory: 16Gi, aicpu: 1, vpc: 2, jpegd: 6, jpege: 1}
        - {name: vir10_3c_32g, aicore: 10, memory: 32Gi, aicpu: 3, vpc: 4, vdec: 1, jpegd: 12, jpege: 2}
      existing: [{vnpuId: 102, template: vir05_1c_16g}]
  - physicalId: 1
    chipName: 910B3
    vnpu: {mode: vm, resources: {aicore: 20}, templates: [{name: vir05_1c_16g, aicore: 5, memory: 16Gi}]}
  - physicalId: 2
    chipName: 910B3
  - physicalId: 3
    chipName: 310P3
    vnpu:
      resources: {aicore: 8, vpc: 12}
      templates: [{name: vir04_4c_dvpp, aicore: 4, memory: 12Gi, vpc: 12}]
  - physicalId: 4
    chipName: '910'
    vnpu:
      resources: {aicore: 32, vpc: 2}
      templates: [{name: vir16, aicore: 16, memory: 16Gi, aicpu: 7, vpc: 8}]
"""


class Node:
    """A fake node: inventory file, state file and dev root in a temp dir."""

    def __init__(self, root: Path, inventory: str = INVENTORY) -> None:
        self.inventory, self.state, self.dev = root / "inventory.yaml", root / "state" / "hw.json", root / "dev"
        self.inventory.write_text(inventory)

    def backend(self) -> FakeBackend:
        backend = FakeBackend(self.inventory, vnpu_state=self.state, dev_root=self.dev)
        backend.discover()
        return backend

    def read(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.state.read_text())
        return document

    def edit(self, **changes: Any) -> None:
        self.state.write_text(json.dumps(self.read() | changes))

    def nodes(self) -> list[str]:
        return sorted(p.name for p in self.dev.glob("vdavinci*")) if self.dev.exists() else []


@pytest.fixture
def node(tmp_path: Path) -> Node:
    return Node(tmp_path)


def test_the_fake_backend_is_a_vnpu_backend(node: Node) -> None:
    assert isinstance(node.backend(), VnpuBackend)


def test_nothing_is_written_until_the_first_vnpu_call(node: Node) -> None:
    backend = node.backend()
    backend.sample()
    assert not node.state.exists() and node.nodes() == []
    assert backend.list_vnpus(0) == [Vnpu(0, 102, "vir05_1c_16g")]
    assert node.read() == {
        "bootId": read_boot_id(),
        "recover": True,
        "vnpus": {"0": [{"vnpuId": 102, "template": "vir05_1c_16g"}]},
        "faults": {},
    }
    assert node.nodes() == ["vdavinci102"]
    assert node.state.stat().st_mode & 0o777 == 0o600


def test_create_and_destroy_keep_the_file_and_the_nodes(node: Node) -> None:
    backend = node.backend()
    assert backend.create_vnpu(0, "vir05_1c_16g", 100) == 100
    assert backend.create_vnpu(0, "vir05_1c_16g", 0xFFFFFFFF) == 101  # the driver picks the lowest free id
    assert node.nodes() == ["vdavinci100", "vdavinci101", "vdavinci102"]
    chip = backend.chip_vnpu(0)
    assert chip is not None and [v.vnpu_id for v in chip.vnpus] == [102, 100, 101]
    backend.destroy_vnpu(0, 102)
    assert node.nodes() == ["vdavinci100", "vdavinci101"]
    assert [v["vnpuId"] for v in node.read()["vnpus"]["0"]] == [100, 101]
    assert node.backend().list_vnpus(0) == [Vnpu(0, 100, "vir05_1c_16g"), Vnpu(0, 101, "vir05_1c_16g")]


@pytest.mark.parametrize("manager", ["character device", "regular file", "absent"])
def test_a_vnpu_node_is_a_character_device_like_davinci_manager_else_a_file(node: Node, manager: str) -> None:
    """On the local cluster the fake NPUs are character devices, and the runtime refuses a CDI device
    node that is not one: a vNPU's node then takes davinci_manager's numbers (found by the real cluster)."""
    node.dev.mkdir()
    if manager == "character device":
        try:
            os.mknod(node.dev / "davinci_manager", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("mknod needs CAP_MKNOD")
    elif manager == "regular file":
        (node.dev / "davinci_manager").touch()
    node.backend().create_vnpu(0, "vir05_1c_16g", 100)
    made = (node.dev / "vdavinci100").stat()
    if manager == "character device":
        assert stat.S_ISCHR(made.st_mode) and made.st_rdev == os.makedev(1, 3)
    else:
        assert stat.S_ISREG(made.st_mode)
    node.backend().destroy_vnpu(0, 100)
    assert not (node.dev / "vdavinci100").exists()


def test_a_chip_without_a_vnpu_block_cannot_be_split(node: Node) -> None:
    backend = node.backend()
    assert backend.chip_vnpu(2) is None
    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(2, "vir05_1c_16g", 132)
    assert raised.value.code == -8008


@pytest.mark.parametrize(
    ("physical_id", "template", "vnpu_id", "code", "words"),
    [
        (1, "vir05_1c_16g", 116, -8002, "vm mode, not container"),
        (0, "vir07", 100, -8001, "unknown template (the chip has: vir05_1c_16g, vir10_3c_32g)"),
        (0, "vir05_1c_16g", 99, -8001, "outside the chip's range 100-115"),
        (0, "vir05_1c_16g", 116, -8001, "outside the chip's range 100-115"),
        (0, "vir05_1c_16g", 0xFFFF, -8001, "outside the chip's range"),
        (0, "vir05_1c_16g", 102, -8001, "the id is in use"),
    ],
)
def test_the_driver_refuses_what_it_refuses(
    node: Node, *, physical_id: int, template: str, vnpu_id: int, code: int, words: str
) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    before = node.read()
    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(physical_id, template, vnpu_id)
    assert raised.value.code == code
    assert words in str(raised.value) and f"npu-{physical_id}" in str(raised.value)
    assert node.read() == before and node.nodes() == ["vdavinci102"]


def test_resources_are_checked_by_sums(node: Node) -> None:
    backend = node.backend()  # vir05 102 exists: 5 of 20 AI cores, 2 of 9 VPC
    backend.create_vnpu(0, "vir10_3c_32g", 100)
    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(0, "vir10_3c_32g", 101)  # AI cores 25 > 20
    assert raised.value.code == -8005 and "check aicore num failed" in str(raised.value)
    assert backend.create_vnpu(0, "vir05_1c_16g", 101) == 101  # 20 of 20
    with pytest.raises(VnpuError, match="check aicore num failed"):
        backend.create_vnpu(0, "vir05_1c_16g", 103)


def test_media_units_are_checked_on_310p(node: Node) -> None:
    backend = node.backend()
    backend.create_vnpu(3, "vir04_4c_dvpp", 148)
    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(3, "vir04_4c_dvpp", 149)  # AI cores 8 of 8 would fit; VPC 24 > 12 does not
    assert raised.value.code == -8005 and "check vpc num failed" in str(raised.value)


def test_media_units_and_unreported_aicpu_are_not_checked_on_910a(node: Node) -> None:
    backend = node.backend()  # 910: VPC 8 + 8 > 2, AI CPU not reported: only AI cores count
    assert [backend.create_vnpu(4, "vir16", i) for i in (164, 165)] == [164, 165]
    with pytest.raises(VnpuError, match="check aicore num failed"):
        backend.create_vnpu(4, "vir16", 166)


def test_ai_cpus_are_checked_when_the_chip_reports_them(tmp_path: Path) -> None:
    inventory = """devices:
  - physicalId: 0
    chipName: 910B3
    vnpu:
      resources: {aicore: 20, aicpu: 1}
      templates: [{name: vir05_1c_16g, aicore: 5, memory: 16Gi, aicpu: 1}]
"""
    backend = Node(tmp_path, inventory).backend()
    backend.create_vnpu(0, "vir05_1c_16g", 100)
    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(0, "vir05_1c_16g", 101)  # AI cores 10 of 20 would fit; AI CPUs 2 > 1 do not
    assert raised.value.code == -8005 and "check aicpu num failed" in str(raised.value)


def test_at_most_32_vnpus_per_chip(tmp_path: Path) -> None:
    inventory = """devices:
  - physicalId: 0
    chipName: 910B3
    vnpu:
      idRange: [100, 140]
      resources: {aicore: 40}
      templates: [{name: vir01, aicore: 1, memory: 1Gi}]
"""
    backend = Node(tmp_path, inventory).backend()
    for vnpu_id in range(100, 132):
        backend.create_vnpu(0, "vir01", vnpu_id)
    with pytest.raises(VnpuError, match="already holds 32 vNPUs"):
        backend.create_vnpu(0, "vir01", 132)


def test_destroying_an_unknown_id_is_not_found(node: Node) -> None:
    with pytest.raises(VnpuNotFoundError) as raised:
        node.backend().destroy_vnpu(0, 100)
    assert raised.value.code == -8008 and "npu-0" in str(raised.value)


def test_the_destroy_all_id_destroys_every_vnpu_of_the_chip_as_the_driver_does(node: Node) -> None:
    backend = node.backend()
    backend.create_vnpu(0, "vir05_1c_16g", 100)
    backend.create_vnpu(3, "vir04_4c_dvpp", 148)
    backend.destroy_vnpu(0, 0xFFFF)
    assert backend.list_vnpus(0) == [] and node.nodes() == ["vdavinci148"]


def test_create_error_fails_the_next_n_creates_counting_down_in_the_file(node: Node) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(faults={"createError": -8005, "createErrorCount": 2})
    for remaining in ({"createError": -8005, "createErrorCount": 1}, {}):
        with pytest.raises(VnpuError) as raised:
            backend.create_vnpu(0, "vir05_1c_16g", 100)
        assert raised.value.code == -8005 and "faults.createError" in str(raised.value)
        assert node.read()["faults"] == remaining
    assert node.nodes() == ["vdavinci102"]
    assert backend.create_vnpu(0, "vir05_1c_16g", 100) == 100


def test_destroy_busy_refuses_the_next_n_destroys(node: Node) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(faults={"destroyBusy": 2})
    for _ in range(2):
        with pytest.raises(VnpuError) as raised:
            backend.destroy_vnpu(0, 102)
        assert raised.value.code == -8020 and "id 102" in str(raised.value)
    assert node.read()["faults"] == {} and node.nodes() == ["vdavinci102"]
    backend.destroy_vnpu(0, 102)
    assert node.nodes() == []


def test_create_delay_holds_the_create(node: Node) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(faults={"createDelaySeconds": 0.2})
    started = time.monotonic()
    backend.create_vnpu(0, "vir05_1c_16g", 100)
    assert time.monotonic() - started >= 0.2  # a lower bound holds however loaded the machine is


def test_node_delay_makes_the_node_appear_after_the_create_returned(node: Node) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(faults={"nodeDelaySeconds": 3})
    backend.create_vnpu(0, "vir05_1c_16g", 100)
    assert "vdavinci100" not in node.nodes()
    wait_until(lambda: "vdavinci100" in node.nodes(), 30, "the delayed vdavinci100")


def test_hang_create_makes_the_vnpu_and_blocks_until_killed(node: Node) -> None:
    node.backend().list_vnpus(0)
    node.edit(faults={"hangCreate": True})
    script = (
        "import sys; from pathlib import Path; from npu_plugin.backends.fake.backend import FakeBackend\n"
        "b = FakeBackend(Path(sys.argv[1]), vnpu_state=Path(sys.argv[2]), dev_root=Path(sys.argv[3]))\n"
        "b.create_vnpu(0, 'vir05_1c_16g', 100)\n"
        "print('returned')\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(node.inventory), str(node.state), str(node.dev)],
        cwd=REPO,
        stdout=subprocess.PIPE,
    )
    try:
        wait_until(lambda: "vdavinci100" in node.nodes(), 30, "the hung create's vdavinci100")
        assert [v["vnpuId"] for v in node.read()["vnpus"]["0"]] == [102, 100]
        assert process.poll() is None, "the create returned"
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert process.stdout is not None and process.stdout.read() == b""
    process.stdout.close()


def test_a_hung_create_leaves_the_other_calls_free_and_returns_once_the_knob_no_longer_covers_its_chip(
    node: Node,
) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(faults={"hangCreate": [0]})
    pool = ThreadPoolExecutor(max_workers=2)
    create = pool.submit(backend.create_vnpu, 0, "vir05_1c_16g", 100)
    try:
        wait_until(lambda: "vdavinci100" in node.nodes(), 30, "the hung create's vdavinci100")
        assert not create.done()
        # As with a driver call that hangs, the fake's other calls still answer: the hang holds no
        # lock.
        assert pool.submit(backend.list_vnpus, 0).result(timeout=30) == [
            Vnpu(0, 102, "vir05_1c_16g"),
            Vnpu(0, 100, "vir05_1c_16g"),
        ]
        pool.submit(backend.destroy_vnpu, 0, 102).result(timeout=30)
        # A chip the knob does not name creates as usual.
        assert pool.submit(backend.create_vnpu, 3, "vir04_4c_dvpp", 150).result(timeout=30) == 150
        assert not create.done()
    finally:
        node.edit(faults={"hangCreate": [3]})  # chip 0 no longer named: its create returns
        pool.shutdown(wait=False)  # a create that never returns fails the test (a thread left), not hangs it
    assert create.result(timeout=30) == 100
    assert node.nodes() == ["vdavinci100", "vdavinci150"]


@pytest.mark.parametrize(("recover", "kept"), [(True, ["vdavinci100", "vdavinci102"]), (False, [])])
def test_a_reboot_keeps_the_vnpus_only_with_recover(node: Node, recover: bool, kept: list[str]) -> None:
    node.backend().create_vnpu(0, "vir05_1c_16g", 100)
    node.edit(bootId="before", recover=recover)
    (node.dev / "vdavinci100").unlink()  # a reboot clears /dev; the driver re-creates what it recovers
    assert [v.vnpu_id for v in node.backend().list_vnpus(0)] == [int(n[8:]) for n in reversed(kept)]
    assert node.nodes() == kept
    assert node.read()["bootId"] == read_boot_id()


def test_an_edit_while_serving_is_seen_at_the_next_call(node: Node) -> None:
    backend = node.backend()
    backend.list_vnpus(0)
    node.edit(vnpus={"0": [], "3": [{"vnpuId": 150, "template": "vir04_4c_dvpp"}]})
    assert backend.list_vnpus(0) == [] and backend.list_vnpus(3) == [Vnpu(3, 150, "vir04_4c_dvpp")]


CORRUPT = [
    ("{", "not JSON"),
    ("[]", "expected a JSON object"),
    ('{"bootId": ""}', "bootId: expected a non-empty string"),
    ('{"bootId": "b", "colour": 1}', "unknown key 'colour'"),
    ('{"bootId": "b", "recover": "yes"}', "recover: expected true or false"),
    ('{"bootId": "b", "vnpus": {"x": []}}', "'x' is not a physical id"),
    ('{"bootId": "b", "vnpus": {"0": [{"vnpuId": -1, "template": "vir01"}]}}', "vnpus.0[0].vnpuId"),
    ('{"bootId": "b", "vnpus": {"0": [{"vnpuId": 1}]}}', "vnpus.0[0]: expected {vnpuId, template}"),
    (
        '{"bootId": "b", "vnpus": {"0": [{"vnpuId": 1, "template": "a"}], "1": [{"vnpuId": 1, "template": "a"}]}}',
        "used twice",
    ),
    ('{"bootId": "b", "faults": {"createError": 5}}', "faults.createError: expected a negative DCMI code"),
    ('{"bootId": "b", "faults": {"createErrorCount": 0}}', "faults.createErrorCount"),
    ('{"bootId": "b", "faults": {"hangCreate": 1}}', "faults.hangCreate: expected true, false or a list"),
    ('{"bootId": "b", "faults": {"hangCreate": []}}', "faults.hangCreate: expected true, false or a list"),
    ('{"bootId": "b", "faults": {"hangCreate": [0, -1]}}', "faults.hangCreate[1]: expected an integer >= 0"),
    ('{"bootId": "b", "faults": {"nodeDelaySeconds": -1}}', "faults.nodeDelaySeconds"),
    ('{"bootId": "b", "faults": {"explode": true}}', "faults.explode: unknown knob"),
]


@pytest.mark.parametrize(("text", "problem"), CORRUPT, ids=[c[1] for c in CORRUPT])
def test_a_corrupt_state_file_fails_every_call_naming_the_file_and_changes_nothing(
    node: Node, text: str, problem: str
) -> None:
    node.state.parent.mkdir()
    node.state.write_text(text)
    backend = node.backend()
    for call in (
        lambda: backend.chip_vnpu(0),
        lambda: backend.create_vnpu(0, "vir05_1c_16g", 100),
        lambda: backend.destroy_vnpu(0, 102),
    ):
        with pytest.raises(VnpuError) as raised:
            call()
        assert str(raised.value).startswith(f"fake vNPU state {node.state} is corrupt: ")
        assert problem in str(raised.value)
    assert node.state.read_text() == text and node.nodes() == []


def test_the_state_renders_and_parses_back() -> None:
    state = HardwareState("b", False, {0: [Vnpu(0, 100, "vir05_1c_16g")]}, {"destroyBusy": 1})
    assert parse_state(render_state(state).decode()) == state


def test_without_a_state_file_the_hardware_lives_in_memory_and_leaves_dev_alone(tmp_path: Path) -> None:
    node = Node(tmp_path)
    backend = FakeBackend(node.inventory, dev_root=node.dev)
    backend.discover()
    assert backend.create_vnpu(0, "vir05_1c_16g", 100) == 100
    assert [v.vnpu_id for v in backend.list_vnpus(0)] == [102, 100]
    backend.destroy_vnpu(0, 102)
    assert not node.state.parent.exists() and not node.dev.exists()


def test_a_changed_state_file_hands_the_devices_on(node: Node) -> None:
    async def scenario() -> list[int]:
        backend = node.backend()
        backend.list_vnpus(0)  # the hardware is in use: its file is watched
        watch = DirectoryWatch()
        delivered: asyncio.Queue[list[int]] = asyncio.Queue()
        backend.watch_changes(watch, lambda devices: delivered.put_nowait([d.physical_id for d in devices]))
        watch.start()
        try:
            node.edit(vnpus={})
            return await asyncio.wait_for(delivered.get(), 10)
        finally:
            watch.stop()

    assert asyncio.run(scenario()) == [0, 1, 2, 3, 4]


def test_an_unused_hardware_state_is_not_watched(node: Node) -> None:
    async def scenario() -> None:
        watch = DirectoryWatch()
        node.backend().watch_changes(watch, lambda devices: None)
        watch.start()
        watch.stop()

    asyncio.run(scenario())
    assert not node.state.parent.exists()
