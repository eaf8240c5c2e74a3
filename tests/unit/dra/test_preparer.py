"""dra/preparer.py in process: claims from a dict, a temporary state dir, the refusal table."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.dra.checkpoint import CheckpointStore
from npu_plugin.dra.prepare_results import ClaimRef, PrepareResult
from npu_plugin.dra.preparer import Preparer
from npu_plugin.errors import KubeApiError
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from tests.support.cdi_validation import assert_valid_cdi
from tests.support.fake_devices import profile_devices

DRIVER, POOL = "npu.huawei.com", "node-a"
DP_OWNED = {6: Owner.DEVICE_PLUGIN, 7: Owner.DEVICE_PLUGIN}


class Claims:
    """The API's claims by (namespace, name); a missing claim is the API's 404."""

    def __init__(self) -> None:
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.before_fetch: Callable[[str], object] = lambda _name: None

    def add(self, name: str, uid: str, results: list[dict[str, str]] | None, namespace: str = "ns") -> ClaimRef:
        status = {"allocation": {"devices": {"results": results}}} if results is not None else {}
        self.stored[(namespace, name)] = {
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": status,
        }
        return ClaimRef(namespace, uid, name)

    def fetch(self, namespace: str, name: str) -> Mapping[str, Any]:
        self.before_fetch(name)
        try:
            return self.stored[(namespace, name)]
        except KeyError:
            raise KubeApiError(f"get resourceclaim {namespace}/{name}", 404, "not found") from None


def ours(device: str, request: str = "npu", pool: str = POOL) -> dict[str, str]:
    return {"request": request, "driver": DRIVER, "pool": pool, "device": device}


@pytest.fixture
def claims() -> Claims:
    return Claims()


def make_preparer(tmp_path: Path, claims: Claims, cdi_root: Path | None = None) -> Preparer:
    inventory = Inventory(
        profile_devices("atlas-800t-a2"),
        failure_threshold=1,
        recovery_threshold=1,
        owners={**{i: Owner.DRA for i in range(6)}, **DP_OWNED},
    )
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    cdi = cdi_root or tmp_path / "cdi"
    cdi.mkdir(exist_ok=True)
    return Preparer(
        driver=DRIVER,
        pool=POOL,
        cdi_root=cdi,
        state_dir=state,
        layout=HostLayout("/host/dev", Injection.NODES, (), ()),
        store=CheckpointStore(state, "boot"),
        snapshot=inventory.snapshot,
        fetch_claim=claims.fetch,
    )


@pytest.fixture
def preparer(tmp_path: Path, claims: Claims) -> Preparer:
    return make_preparer(tmp_path, claims)


def checkpoint_claims(preparer: Preparer) -> dict[str, Any]:
    claims: dict[str, Any] = json.loads(preparer.store.path.read_text())["claims"]
    return claims


REFUSALS: dict[str, tuple[Any, str]] = {
    "missing": (
        lambda c: ClaimRef("ns", "u-missing", "missing"),
        "claim ns/missing: get resourceclaim ns/missing: HTTP 404: not found",
    ),
    "uid-mismatch": (
        lambda c: ClaimRef("ns", "u-asked", c.add("m", "u-api", [ours("npu-1")]).name),
        "claim ns/m: claim UID mismatch: the kubelet asked for u-asked, the API has u-api",
    ),
    "not-allocated": (lambda c: c.add("na", "u-na", None), "claim ns/na: the claim is not allocated"),
    "other-pool": (lambda c: c.add("op", "u-op", [ours("npu-1", pool="node-b")]), "not this node's pool"),
    "unknown": (lambda c: c.add("un", "u-un", [ours("npu-42")]), "device npu-42: unknown device on this node"),
    "dp-owned": (lambda c: c.add("dp", "u-dp", [ours("npu-6")]), "device npu-6: owned by device-plugin, not DRA"),
    "held": (lambda c: c.add("held", "u-held", [ours("npu-0")]), "device npu-0: already prepared for claim u-good"),
    "bad-uid": (lambda c: ClaimRef("ns", "../../etc/x", "x"), "invalid claim UID '../../etc/x'"),
    "bad-name": (lambda c: ClaimRef("ns", "u-bn", "a/b"), "invalid claim namespace/name 'ns'/'a/b'"),
    "bad-namespace": (lambda c: ClaimRef("..", "u-bns", "x"), "invalid claim namespace/name '..'/'x'"),
    "uid-with-newline": (lambda c: ClaimRef("ns", "u-nl\n", "x"), "invalid claim UID 'u-nl\\n'"),
    "name-with-newline": (lambda c: ClaimRef("ns", "u-nn", "x\n"), "invalid claim namespace/name 'ns'/'x\\n'"),
    # A megabyte of input is named, not repeated: the message ends up in a gRPC response and a log
    # line.
    "huge-name": (lambda c: ClaimRef("ns", "u-huge", "x" * 2**20), "xxxx... (1048578 characters)"),
}


@pytest.mark.parametrize("case", REFUSALS, ids=REFUSALS.keys())
def test_a_refused_claim_fails_alone(case: str, preparer: Preparer, claims: Claims, tmp_path: Path) -> None:
    make_ref, reason = REFUSALS[case]
    good = claims.add("good", "u-good", [ours("npu-0")])
    refused = make_ref(claims)
    results = preparer.prepare([good, refused])
    assert results[good.uid].error == "" and [d.device_name for d in results[good.uid].devices] == ["npu-0"]
    assert reason in results[refused.uid].error and results[refused.uid].devices == ()
    assert len(results[refused.uid].error) < 1000
    assert set(checkpoint_claims(preparer)) == {good.uid}
    assert [p.name for p in (tmp_path / "cdi").iterdir()] == [f"{DRIVER}-claim_u-good.json"]


def test_prepare_is_idempotent_and_rewrites_the_spec(preparer: Preparer, claims: Claims, tmp_path: Path) -> None:
    ref = claims.add("c", "u1", [ours("npu-1", "a"), ours("npu-2", "a"), ours("npu-3", "b/sub")])
    first = preparer.prepare([ref])
    spec_file = tmp_path / "cdi" / f"{DRIVER}-claim_u1.json"
    content = spec_file.read_bytes()
    assert_valid_cdi(json.loads(content))
    spec_file.unlink()
    assert preparer.prepare([ref]) == first
    assert spec_file.read_bytes() == content
    assert [(d.request_names, d.cdi_device_ids) for d in first[ref.uid].devices] == [
        (("a",), (f"{DRIVER}/npu=u1-a",)),
        (("a",), ()),
        (("b",), (f"{DRIVER}/npu=u1-b",)),
    ]
    assert preparer.prepared_claims == 1 and preparer.held_devices() == {1, 2, 3}


def test_a_prepared_claim_is_answered_without_the_api(preparer: Preparer, claims: Claims) -> None:
    ref = claims.add("c", "u1", [ours("npu-1")])
    first = preparer.prepare([ref])
    claims.stored.clear()  # the API is down, or the claim is already gone from it
    assert preparer.prepare([ref]) == first


def test_a_claim_the_other_daemon_unprepares_meanwhile_is_read_under_the_lock(tmp_path: Path, claims: Claims) -> None:
    mine, other = make_preparer(tmp_path, claims), make_preparer(tmp_path, claims)  # a rolling update's two pods
    ref, fresh = claims.add("c", "u1", [ours("npu-1")]), claims.add("f", "u2", [ours("npu-2")])
    mine.prepare([ref])
    # After `mine` saw u1 completed and while it reads u2 from the API, the other daemon unprepares
    # u1.
    claims.before_fetch = lambda name: name == "f" and other.unprepare([ref])
    assert [r.error for r in mine.prepare([ref, fresh]).values()] == ["", ""]
    assert set(checkpoint_claims(mine)) == {"u1", "u2"}


def test_unprepare_forgets_the_claim_and_accepts_unknown_ones(
    preparer: Preparer, claims: Claims, tmp_path: Path
) -> None:
    ref = claims.add("c", "u1", [ours("npu-1")])
    preparer.prepare([ref])
    del claims.stored[("ns", "c")]  # the claim may be gone from the API by now
    assert preparer.unprepare([ref, ClaimRef("ns", "u-never", "never")]) == {"u1": "", "u-never": ""}
    assert checkpoint_claims(preparer) == {} and list((tmp_path / "cdi").iterdir()) == []
    assert preparer.unprepare([ClaimRef("ns", "../x", "x")]) == {"../x": "invalid claim UID '../x'"}


def test_the_same_device_is_free_again_after_unprepare(preparer: Preparer, claims: Claims) -> None:
    first, second = claims.add("a", "u-a", [ours("npu-4")]), claims.add("b", "u-b", [ours("npu-4")])
    preparer.prepare([first])
    assert "already prepared for claim u-a" in preparer.prepare([second])[second.uid].error
    preparer.unprepare([first])
    assert preparer.prepare([second])[second.uid].error == ""


def test_two_claims_of_one_request_for_the_same_device_only_one_wins(preparer: Preparer, claims: Claims) -> None:
    first, second = claims.add("a", "u-a", [ours("npu-4")]), claims.add("b", "u-b", [ours("npu-4")])
    results = preparer.prepare([first, second])
    assert results[first.uid] == PrepareResult(results[first.uid].devices) and results[first.uid].devices
    assert "already prepared for claim u-a" in results[second.uid].error


def test_a_cdi_write_failure_is_a_claim_error_and_reserves_nothing(tmp_path: Path, claims: Claims) -> None:
    preparer = make_preparer(tmp_path, claims)
    preparer.cdi_root.rmdir()
    preparer.cdi_root.write_text("")  # a file where the directory was: the spec cannot be written (ENOTDIR)
    ref = claims.add("c", "u1", [ours("npu-1")])
    assert "cannot write" in preparer.prepare([ref])[ref.uid].error
    assert checkpoint_claims(preparer) == {}


def test_garbage_collection_drops_interrupted_claims_and_orphaned_specs(
    preparer: Preparer, claims: Claims, tmp_path: Path
) -> None:
    done, interrupted = claims.add("d", "u-done", [ours("npu-1")]), claims.add("i", "u-int", [ours("npu-2")])
    preparer.prepare([done, interrupted])
    document = json.loads(preparer.store.path.read_text())
    document["claims"]["u-int"]["state"] = "PrepareStarted"
    preparer.store.path.write_text(json.dumps(document))
    orphan = tmp_path / "cdi" / f"{DRIVER}-claim_u-orphan.json"
    orphan.write_text("{}")
    unrelated = tmp_path / "cdi" / "other-vendor.json"
    unrelated.write_text("{}")
    preparer.collect_garbage()
    assert set(checkpoint_claims(preparer)) == {"u-done"}
    assert {p.name for p in (tmp_path / "cdi").iterdir()} == {f"{DRIVER}-claim_u-done.json", "other-vendor.json"}


def test_garbage_collection_removes_temporary_files_a_crash_left(preparer: Preparer, tmp_path: Path) -> None:
    cdi, state = tmp_path / "cdi", tmp_path / "state"
    leftovers = [cdi / f".{DRIVER}-claim_u1.json.k2j4x9qa.tmp", state / ".checkpoint.json.0a1b2c3d.tmp"]
    kept = [cdi / ".other-vendor.json.k2j4x9qa.tmp", cdi / f"{DRIVER}-device-plugin.json", state / "notes.tmp"]
    for path in leftovers + kept:
        path.write_text("{")
    preparer.collect_garbage()
    assert [p.exists() for p in leftovers + kept] == [False] * len(leftovers) + [True] * len(kept)


def error_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]


def test_a_checkpoint_garbled_while_serving_forgets_no_claim(
    preparer: Preparer, claims: Claims, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = claims.add("a", "u-a", [ours("npu-4")]), claims.add("b", "u-b", [ours("npu-4")])
    third = claims.add("c", "u-c", [ours("npu-5")])
    assert preparer.prepare([first])[first.uid].error == ""
    preparer.store.path.write_bytes(b"\x00garbage{")
    assert "device npu-4: already prepared for claim u-a" in preparer.prepare([second])[second.uid].error
    assert preparer.prepare([third])[third.uid].error == ""
    assert set(checkpoint_claims(preparer)) == {"u-a", "u-c"}, "rewritten good, with the claim it held"
    [aside] = (tmp_path / "state").glob("checkpoint.json.corrupt-*")
    assert aside.read_bytes() == b"\x00garbage{"
    [error] = error_records(caplog)  # once per incident, not once per call
    assert "is corrupt" in error and "while serving" in error and "keeping the 1 claim(s)" in error


def test_a_checkpoint_deleted_while_serving_is_written_back(
    preparer: Preparer, claims: Claims, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = claims.add("a", "u-a", [ours("npu-4")]), claims.add("b", "u-b", [ours("npu-4")])
    preparer.prepare([first])
    preparer.store.path.unlink()
    assert "already prepared for claim u-a" in preparer.prepare([second])[second.uid].error
    assert set(checkpoint_claims(preparer)) == {"u-a"}
    assert ["vanished" in e for e in error_records(caplog)] == [True]


def test_after_a_rewrite_from_memory_specs_of_unknown_claims_block_new_claims(
    tmp_path: Path, claims: Claims, caplog: pytest.LogCaptureFixture
) -> None:
    mine, other = make_preparer(tmp_path, claims), make_preparer(tmp_path, claims)  # a rolling update's two pods
    ours_first, theirs = claims.add("a", "u-a", [ours("npu-1")]), claims.add("t", "u-t", [ours("npu-2")])
    fresh = claims.add("f", "u-f", [ours("npu-3")])
    mine.prepare([ours_first])
    other.prepare([theirs])  # `mine` has not read the checkpoint since
    mine.store.path.write_bytes(b"{")
    refused = mine.prepare([fresh])[fresh.uid].error
    assert "specs of claims it does not know (u-t)" in refused and "no new claim is prepared" in refused
    assert mine.prepare([theirs])[theirs.uid].error == "", "the unknown claim itself may be prepared again"
    assert mine.prepare([fresh])[fresh.uid].error == ""
    assert set(checkpoint_claims(mine)) == {"u-a", "u-t", "u-f"}


def test_a_directory_in_place_of_the_checkpoint_while_serving_fails_each_claim_clearly(
    preparer: Preparer, claims: Claims
) -> None:
    first, second = claims.add("a", "u-a", [ours("npu-4")]), claims.add("b", "u-b", [ours("npu-5")])
    preparer.prepare([first])
    preparer.store.path.unlink()
    preparer.store.path.mkdir()
    expected = f"cannot read the checkpoint: {preparer.store.path}: Is a directory (EISDIR)"
    assert preparer.prepare([second])[second.uid].error == f"claim ns/b: {expected}"
    assert preparer.unprepare([first]) == {"u-a": f"claim ns/a: {expected}"}
    preparer.store.path.rmdir()
    assert preparer.prepare([second])[second.uid].error == ""
    assert set(checkpoint_claims(preparer)) == {"u-a", "u-b"}, "the claim held before is still recorded"


def test_the_state_lock_never_follows_a_symlink(preparer: Preparer, claims: Claims, tmp_path: Path) -> None:
    target = tmp_path / "outside"
    (tmp_path / "state" / "prepare.lock").symlink_to(target)
    ref = claims.add("a", "u-a", [ours("npu-4")])
    error = preparer.prepare([ref])[ref.uid].error
    assert "cannot open the state lock" in error and "(ELOOP)" in error
    assert not target.exists()
