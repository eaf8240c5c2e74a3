"""dra/checkpoint.py: the versioned checkpoint round-trips; anything else is a CheckpointError."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.vnpu import VnpuOrigin
from npu_plugin.dra.checkpoint import (
    PREPARE_COMPLETED,
    PREPARE_STARTED,
    Checkpoint,
    CheckpointStore,
    ClaimEntry,
    PreparedDevice,
    VnpuRecord,
)
from npu_plugin.errors import CheckpointError
from npu_plugin.host.boot import read_boot_id

FIXTURES = Path(__file__).parents[2] / "fixtures" / "checkpoint"


def device(name: str, physical_id: int, cdi: tuple[str, ...] = (), request: str = "npu") -> PreparedDevice:
    return PreparedDevice(
        request_names=(request,), pool_name="node-a", device_name=name, physical_id=physical_id, cdi_device_ids=cdi
    )


DEVICE = device("npu-1", 1, ("npu.huawei.com/npu=u1-npu",))
CHECKPOINT = Checkpoint(
    "boot-1",
    {
        "u1": ClaimEntry("ns", "one", PREPARE_COMPLETED, (DEVICE, device("npu-2", 2))),
        "u0": ClaimEntry("ns", "zero", PREPARE_STARTED, ()),
    },
)


def test_round_trip() -> None:
    assert Checkpoint.from_bytes(CHECKPOINT.to_bytes()) == CHECKPOINT


def test_the_document_shape() -> None:
    document = json.loads(CHECKPOINT.to_bytes())
    assert list(document) == ["version", "bootId", "claims"]
    assert document["version"] == 1 and list(document["claims"]) == ["u0", "u1"]
    assert document["claims"]["u1"]["devices"][0] == {
        "requestNames": ["npu"],
        "poolName": "node-a",
        "deviceName": "npu-1",
        "physicalId": 1,
        "cdiDeviceIds": ["npu.huawei.com/npu=u1-npu"],
    }


def test_a_checkpoint_written_before_physical_ids_were_recorded_loads_with_them() -> None:
    """The exact bytes the previous release wrote: device entries carry only `npu-<id>` names."""
    loaded = Checkpoint.from_bytes((FIXTURES / "v1-names-only.json").read_bytes())
    assert loaded.boot_id == "6c3f0e2a-5b1d-4f7e-9a8c-2d4b6e8f0a1c"
    train = loaded.claims["7f1d2c3b-aaaa-4bbb-8ccc-0123456789ab"]
    assert train.state == PREPARE_COMPLETED
    assert [(d.request_names, d.device_name, d.physical_id) for d in train.devices] == [
        (("train",), "npu-4", 4),
        (("train",), "npu-5", 5),
        (("infer",), "npu-12", 12),
    ]
    assert train.devices[0].cdi_device_ids == ("npu.huawei.com/npu=7f1d2c3b-aaaa-4bbb-8ccc-0123456789ab-train",)
    assert loaded.claims["0a9b8c7d-1111-4222-8333-444455556666"].state == PREPARE_STARTED
    assert loaded.held_devices() == {0, 4, 5, 12}
    # Saved again, the entries gain the field and nothing else changes.
    assert Checkpoint.from_bytes(loaded.to_bytes()) == loaded


GOOD_DEVICE = {"requestNames": ["npu"], "poolName": "p", "deviceName": "npu-0", "cdiDeviceIds": []}


def claims_with(**fields: Any) -> bytes:
    entry = {"namespace": "ns", "name": "c", "state": "PrepareCompleted", "devices": [GOOD_DEVICE], **fields}
    return json.dumps(
        {
            "version": 1,
            "bootId": "b",
            "claims": {"u": {k: v for k, v in entry.items() if v is not None or k != "devices"}},
        }
    ).encode()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"{", "not JSON"),
        (b"\xff\xfe", "not JSON"),
        (b"[]", "unsupported checkpoint version None"),
        (b'{"claims": {}}', "unsupported checkpoint version None"),
        (b'{"version": 2, "claims": {}}', "unsupported checkpoint version 2"),
        (b'{"version": "1", "claims": {}}', "unsupported checkpoint version '1'"),
        (b'{"version": 1}', "`claims` is not an object"),
        (b'{"version": 1, "claims": []}', "`claims` is not an object"),
        (b'{"version": 1, "claims": {"u": 1}}', "malformed claim entry"),
        (b'{"version": 1, "claims": {"u": {"state": "Prepared"}}}', "malformed claim entry"),
        (claims_with(devices=None), "without a devices list"),
        (claims_with(devices=[{}]), "malformed device"),
        (claims_with(devices=[7]), "malformed device"),
        (claims_with(devices=[{**GOOD_DEVICE, "requestNames": 5}]), "requestNames is not a list of strings"),
        (claims_with(devices=[{**GOOD_DEVICE, "requestNames": "npu"}]), "requestNames is not a list of strings"),
        (claims_with(devices=[{**GOOD_DEVICE, "cdiDeviceIds": [1]}]), "cdiDeviceIds is not a list of strings"),
        (claims_with(devices=[{**GOOD_DEVICE, "poolName": None}]), "poolName is not a string"),
        (claims_with(devices=[{**GOOD_DEVICE, "physicalId": "0"}]), "physicalId is not a non-negative integer"),
        (claims_with(devices=[{**GOOD_DEVICE, "physicalId": -1}]), "physicalId is not a non-negative integer"),
        (claims_with(devices=[{**GOOD_DEVICE, "physicalId": True}]), "physicalId is not a non-negative integer"),
        (claims_with(devices=[{**GOOD_DEVICE, "deviceName": "gpu-0"}]), "no physicalId and not named npu-<id>"),
        (claims_with(name=3), "malformed claim entry"),
        (claims_with(namespace=None), "malformed claim entry"),
    ],
)
def test_anything_else_is_refused(data: bytes, reason: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        Checkpoint.from_bytes(data)
    assert reason in str(raised.value)


def test_held_names_the_other_claims_devices() -> None:
    assert ("u1", "npu-2", None) in CHECKPOINT.held("someone-else")
    assert all(uid != "u1" for uid, _name, _share in CHECKPOINT.held("u1"))


VNPU_RECORD = VnpuRecord(4, "vir05_1c_16g", 164, VnpuOrigin.DYNAMIC)
VNPU_DEVICE = PreparedDevice(("vnpu",), "n1", "npu-4-vir05-1c-16g-0", 4, ("npu.huawei.com/npu=u2-vnpu",), VNPU_RECORD)


def test_a_vnpu_record_is_an_optional_object_per_device() -> None:
    checkpoint = Checkpoint("boot-1", {"u2": ClaimEntry("ns", "two", PREPARE_STARTED, (VNPU_DEVICE,))})
    document = json.loads(checkpoint.to_bytes())
    assert document["version"] == 1
    assert document["claims"]["u2"]["devices"][0] == {
        "requestNames": ["vnpu"],
        "poolName": "n1",
        "deviceName": "npu-4-vir05-1c-16g-0",
        "physicalId": 4,
        "cdiDeviceIds": ["npu.huawei.com/npu=u2-vnpu"],
        "vnpu": {"physicalId": 4, "template": "vir05_1c_16g", "vnpuId": 164, "origin": "dynamic"},
    }
    assert Checkpoint.from_bytes(checkpoint.to_bytes()) == checkpoint
    assert checkpoint.vnpus() == [("u2", VNPU_RECORD)]
    assert checkpoint.held("u9") == [("u2", "npu-4-vir05-1c-16g-0", None)]


def test_without_vnpus_the_bytes_are_those_of_the_previous_release() -> None:
    """--vnpu off: no device carries the key, so the file is what an older binary writes and
    reads."""
    assert b'"vnpu"' not in CHECKPOINT.to_bytes()
    assert CHECKPOINT.vnpus() == []


GOOD_VNPU = {"physicalId": 4, "template": "vir05_1c_16g", "vnpuId": 164, "origin": "static"}


@pytest.mark.parametrize(
    ("vnpu", "reason"),
    [
        ("x", "malformed vnpu record 'x'"),
        ({**GOOD_VNPU, "vnpuId": -1}, "physicalId and vnpuId must be integers >= 0"),
        ({**GOOD_VNPU, "physicalId": True}, "physicalId and vnpuId must be integers >= 0"),
        ({**GOOD_VNPU, "vnpuId": None}, "physicalId and vnpuId must be integers >= 0"),
        ({**GOOD_VNPU, "template": 5}, "template is not a string"),
        ({**GOOD_VNPU, "origin": "foreign"}, "origin is not dynamic or static"),
    ],
)
def test_a_malformed_vnpu_record_is_refused(vnpu: Any, reason: str) -> None:
    with pytest.raises(CheckpointError) as raised:
        Checkpoint.from_bytes(claims_with(devices=[{**GOOD_DEVICE, "vnpu": vnpu}]))
    assert reason in str(raised.value)


def test_store_saves_atomically_and_loads(tmp_path: Path) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    assert store.load() == Checkpoint("boot-1")
    store.save(CHECKPOINT)
    assert store.load() == CHECKPOINT
    assert {p.name for p in tmp_path.iterdir()} == {"checkpoint.json"}
    assert store.path.stat().st_mode & 0o777 == 0o600


def test_a_checkpoint_of_an_earlier_boot_keeps_its_claims(tmp_path: Path) -> None:
    CheckpointStore(tmp_path, "boot-0").save(CHECKPOINT)
    loaded = CheckpointStore(tmp_path, "boot-1").load()
    assert loaded.boot_id == "boot-1" and loaded.claims == CHECKPOINT.claims


def test_a_corrupt_checkpoint_is_moved_aside(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    store.path.write_bytes(b"garbage")
    assert store.load() == Checkpoint("boot-1")
    [aside] = tmp_path.glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == b"garbage" and not store.path.exists()
    assert "is corrupt" in caplog.text


def test_boot_id(tmp_path: Path) -> None:
    (tmp_path / "boot_id").write_text("abc\n")
    assert read_boot_id(tmp_path / "boot_id") == "abc"
    assert read_boot_id(tmp_path / "missing") == "unknown"


def test_a_symlink_in_place_of_the_checkpoint_is_not_read_through(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere.json"
    secret.write_bytes(CHECKPOINT.to_bytes())
    store = CheckpointStore(tmp_path / "state", "boot-1")
    store.path.parent.mkdir()
    store.path.symlink_to(secret)
    with pytest.raises(CheckpointError) as raised:
        store.load()
    assert str(raised.value) == (f"cannot read the checkpoint: {store.path}: Too many levels of symbolic links (ELOOP)")
    assert store.path.is_symlink() and secret.read_bytes() == CHECKPOINT.to_bytes()


OTHER = Checkpoint("boot-1", {"u9": ClaimEntry("ns", "nine", PREPARE_STARTED, (device("npu-7", 7),))})


def _corrupt(path: Path) -> None:
    path.write_bytes(b"garbage")


def _directory(path: Path) -> None:
    path.mkdir()


def _unchanged(_path: Path) -> None:
    pass


@pytest.mark.parametrize(
    ("loaded_before", "on_disk", "expected"),
    [
        (False, _unchanged, Checkpoint("boot-1")),  # nothing stored, nothing read: empty
        (False, lambda path: path.write_bytes(OTHER.to_bytes()), OTHER),  # written by another daemon: as stored
        (True, lambda path: path.write_bytes(OTHER.to_bytes()), OTHER),
        (True, _corrupt, CHECKPOINT),  # unreadable: what this daemon last read or wrote
        (True, lambda path: path.unlink(), CHECKPOINT),
        (True, lambda path: (path.unlink(), _directory(path)), CHECKPOINT),
        (False, _corrupt, Checkpoint("boot-1")),
    ],
    ids=["empty", "other-daemon", "other-daemon-after-ours", "corrupt", "vanished", "a-directory", "corrupt-at-start"],
)
def test_peek_reads_without_side_effects_and_falls_back_to_the_last_good(
    tmp_path: Path, loaded_before: bool, on_disk: Any, expected: Checkpoint
) -> None:
    store = CheckpointStore(tmp_path, "boot-1")
    if loaded_before:
        store.save(CHECKPOINT)
    on_disk(store.path)
    before = sorted(p.name for p in tmp_path.iterdir())
    assert store.peek() == expected
    assert sorted(p.name for p in tmp_path.iterdir()) == before, "peek moved or wrote a file"
    assert store.completed_claims() == {u for u, e in expected.claims.items() if e.state == PREPARE_COMPLETED}
