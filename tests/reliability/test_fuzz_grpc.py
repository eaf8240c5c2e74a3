"""Bad input at every gRPC method of one running daemon (both mode: device plugin on 0-3, DRA on
4-7).

Hypothesis sends random ids, thousands of ids, empty / unicode / 1 MiB strings, raw bytes that are
no message at all, and plants ResourceClaims whose status.allocation has the wrong type at every
level. The daemon answers OK or INVALID_ARGUMENT (per-claim errors for DRA), never crashes, keeps
serving, and never leaves a bad file: after every example the checkpoint parses, every CDI spec
validates, no device is held twice, and the claim prepared at the start still holds npu-5.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import grpc
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as dp_pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from npu_plugin._proto import dra_health_v1alpha1_pb2 as health_pb
from npu_plugin._proto import dra_health_v1alpha1_pb2_grpc as health_grpc
from npu_plugin._proto import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from npu_plugin._proto import pluginregistration_v1_pb2 as reg_pb
from npu_plugin._proto import pluginregistration_v1_pb2_grpc as reg_grpc
from npu_plugin.cdi.spec import CLAIM_WIDE
from tests.support.dra import DRIVER, NODE, plant_claim, result
from tests.support.serving import Served, serving

FUZZ = settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
OK, INVALID = grpc.StatusCode.OK, grpc.StatusCode.INVALID_ARGUMENT
MIB = 2**20
CALL_TIMEOUT = 60
DP_IDS = [f"Ascend910-{i}" for i in range(8)]
SERVED_BY_DP = DP_IDS[:4]
HOLDER_DEVICE = "npu-5"
FREE_FOR_DRA = {"npu-4", "npu-6", "npu-7"}
# Other spellings of our names, paths, control characters and scripts that `\d` would take for
# digits.
ODD = [
    "",
    " ",
    "Ascend910-03",
    "Ascend910-3\n",
    "Ascend910-\u0663",
    "Ascend910-",
    "Ascend910--1",
    "Ascend910-9999999",
    "Ascend310P-1",
    "npu-1",
    "npu-06",
    "npu-6\n",
    "npu-\u0666",
    "npu-99",
    "../../etc/x",
    "a/b",
    "..",
    "\x00",
    "\u00e9\u4e2d\U0001f4a5",
    "Default",
    "x" * 300,
]
HUGE = ["x" * MIB, "\u00e9" * (MIB // 2), "\U0001f4a5" * (MIB // 4)]  # 1 MiB each, encoded
texts = st.text(max_size=24) | st.sampled_from(ODD + DP_IDS)
id_lists = (
    st.lists(texts, max_size=8)
    | st.builds(lambda i, n: [i] * n, texts, st.integers(1000, 4000))
    | st.sampled_from(HUGE).map(lambda s: [s])
)


DRA_VERSIONS: dict[str, tuple[ModuleType, ModuleType]] = {
    "v1": (dra_v1_pb2, dra_v1_pb2_grpc),
    "v1beta1": (dra_v1beta1_pb2, dra_v1beta1_pb2_grpc),
}
Ref = tuple[str, str, str]  # namespace, name, uid


def dra(channels: dict[str, grpc.Channel], version: str, method: str, refs: list[Ref]) -> Any:
    """NodePrepareResources (`method` "Prepare") or NodeUnprepareResources ("Unprepare") through
    `version`."""
    pb, pb_grpc = DRA_VERSIONS[version]
    request = getattr(pb, f"Node{method}ResourcesRequest")(
        claims=[pb.Claim(namespace=ns, name=name, uid=uid) for ns, name, uid in refs]
    )
    return getattr(pb_grpc.DRAPluginStub(channels["dra"]), f"Node{method}Resources")(request, timeout=CALL_TIMEOUT)


def status_of(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    try:
        call()
    except grpc.RpcError as error:
        return error.code(), error.details() or ""  # type: ignore[no-any-return]
    return OK, ""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("fuzz-grpc")) as running:
        yield running


@pytest.fixture(scope="module")
def channels(served: Served) -> Iterator[dict[str, grpc.Channel]]:
    opened = {
        "dp": served.channel(served.dp_socket),
        "dra": served.channel(served.workspace.dra_socket()),
        "reg": served.channel(served.workspace.registration_socket()),
    }
    yield opened
    for channel in opened.values():
        channel.close()


@pytest.fixture(scope="module")
def holder(served: Served, channels: dict[str, grpc.Channel]) -> str:
    """A claim prepared before the fuzzing: no example may take its device or unprepare it."""
    claim = plant_claim(served.api, "holder", None, [result(HOLDER_DEVICE)])
    answer = dra(channels, "v1", "Prepare", [("default", "holder", claim.uid)])
    assert answer.claims[claim.uid].error == ""
    return claim.uid


def check(served: Served, holder: str) -> None:
    assert [d.device_name for d in served.check().claims[holder].devices] == [HOLDER_DEVICE]


# ---- the device plugin


@FUZZ
@given(st.lists(id_lists, max_size=3))
def test_allocate(served: Served, channels: dict[str, grpc.Channel], holder: str, requests: list[list[str]]) -> None:
    containers = [dp_pb.ContainerAllocateRequest(devices_ids=ids) for ids in requests]
    request = dp_pb.AllocateRequest(container_requests=containers)
    allowed = bool(requests) and all(ids and set(ids) <= set(SERVED_BY_DP) for ids in requests)
    try:
        response = dp_grpc.DevicePluginStub(channels["dp"]).Allocate(request, timeout=CALL_TIMEOUT)
    except grpc.RpcError as error:
        assert (error.code(), allowed) == (INVALID, False), error.details()
    else:
        assert allowed
        visible = [r.envs["ASCEND_VISIBLE_DEVICES"] for r in response.container_responses]
        assert visible == [",".join(str(i) for i in sorted({int(d.split("-")[1]) for d in ids})) for ids in requests]
    check(served, holder)


sizes = st.integers(-3, 10) | st.integers(-(2**31), 2**31 - 1)


@FUZZ
@given(
    st.lists(st.tuples(id_lists, id_lists, sizes), max_size=1)
    | st.lists(st.tuples(st.lists(texts, max_size=8), st.lists(texts, max_size=8), sizes), max_size=3)
)
def test_get_preferred_allocation(
    served: Served, channels: dict[str, grpc.Channel], holder: str, requests: list[tuple[list[str], list[str], int]]
) -> None:
    request = dp_pb.PreferredAllocationRequest(
        container_requests=[
            dp_pb.ContainerPreferredAllocationRequest(
                available_deviceIDs=a, must_include_deviceIDs=m, allocation_size=n
            )
            for a, m, n in requests
        ]
    )
    # What the kubelet could send; anything else may still be answered, but never with a wrong
    # choice.
    sane = all(
        set(a) <= set(SERVED_BY_DP) and set(m) <= set(a) and len(set(m)) <= n <= len(set(a)) for a, m, n in requests
    )
    try:
        response = dp_grpc.DevicePluginStub(channels["dp"]).GetPreferredAllocation(request, timeout=CALL_TIMEOUT)
    except grpc.RpcError as error:
        assert (error.code(), sane) == (INVALID, False), error.details()
    else:
        for (available, must, size), chosen in zip(requests, response.container_responses, strict=True):
            ids = list(chosen.deviceIDs)
            assert len(ids) == len(set(ids)) == size and set(must) <= set(ids) <= set(available)
    check(served, holder)


@FUZZ
@given(id_lists)
def test_pre_start_container_and_options_always_answer(
    served: Served, channels: dict[str, grpc.Channel], holder: str, ids: list[str]
) -> None:
    stub = dp_grpc.DevicePluginStub(channels["dp"])
    assert (
        stub.PreStartContainer(dp_pb.PreStartContainerRequest(devices_ids=ids), timeout=CALL_TIMEOUT)
        == dp_pb.PreStartContainerResponse()
    )
    assert stub.GetDevicePluginOptions(dp_pb.Empty(), timeout=CALL_TIMEOUT).get_preferred_allocation_available
    check(served, holder)


# ---- DRA: Prepare and Unprepare with random references


names = st.text(max_size=20) | st.sampled_from(["default", "holder", "x", *ODD])
uids = st.text(max_size=40) | st.sampled_from(["0", "00000000-0000-4000-8000-000000000000", "-x", "x" * 129, *ODD])
refs = st.tuples(names, names, uids)


@st.composite
def with_a_huge_field(draw: st.DrawFn) -> Ref:
    """A reference with one of its three strings 1 MiB long (one per request: gRPC takes 4 MiB at
    most)."""
    ref = list(draw(refs))
    ref[draw(st.integers(0, 2))] = draw(st.sampled_from(HUGE))
    return ref[0], ref[1], ref[2]


# Thousands of references; each well-formed one costs the daemon an API read, so a few thousand at
# most.
ref_lists = st.builds(
    lambda few, huge: few + huge, st.lists(refs, max_size=4), st.lists(with_a_huge_field(), max_size=1)
) | st.builds(lambda ref, n: [ref] * n, refs, st.integers(1000, 2000))


@FUZZ
@given(ref_lists, st.sampled_from(sorted(DRA_VERSIONS)))
def test_prepare_and_unprepare_random_references(
    served: Served, channels: dict[str, grpc.Channel], holder: str, claims: list[Ref], version: str
) -> None:
    prepared = dra(channels, version, "Prepare", claims).claims
    assert set(prepared) == {uid for _, _, uid in claims}
    # None of these names a claim in the API (the holder's UID is the server's random one).
    assert all(entry.error and not entry.devices for entry in prepared.values())
    assert set(dra(channels, version, "Unprepare", claims).claims) == {uid for _, _, uid in claims}
    check(served, holder)


# ---- DRA: claims in the API with the wrong shape at every level of status.allocation


RESULTS = ("status", "allocation", "devices", "results")
PATHS = (
    [RESULTS[:i] for i in range(1, 5)]
    + [(*RESULTS, 0)]
    + [(*RESULTS, 0, k) for k in ("request", "driver", "pool", "device")]
)
SPELLINGS = [
    "npu-6",
    "npu-06",
    "npu-6\n",
    "npu-\u0666",
    HOLDER_DEVICE,
    "npu-3",
    "npu-99",
    DRIVER,
    NODE,
    "npu",
    "Big Request",
    "npu/small",
    "a/b/c",
    "../x",
    "",
]
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
    | st.sampled_from(SPELLINGS),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=6,
)
planted = itertools.count()


def our_result(device: str, request: str = "npu") -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": NODE, "device": device}


def put_at(body: dict[str, Any], path: tuple[str | int, ...], value: Any) -> None:
    """Replace what is at `path` (when the way there still exists after earlier changes)."""
    parent: Any = body
    for step in path[:-1]:
        try:
            parent = parent[step]
        except (KeyError, IndexError, TypeError):
            return
    if isinstance(parent, dict) or (isinstance(parent, list) and isinstance(path[-1], int) and parent):
        parent[path[-1]] = value


def results_of(body: dict[str, Any]) -> list[Any] | None:
    found: Any = body
    for step in RESULTS:
        found = found.get(step) if isinstance(found, dict) else None
    return found if isinstance(found, list) else None


@st.composite
def claim_bodies(draw: st.DrawFn) -> dict[str, Any]:
    device = draw(st.sampled_from(["npu-6", "npu-4", HOLDER_DEVICE]))
    body: dict[str, Any] = {
        "metadata": {"name": f"shape-{next(planted)}"},
        "spec": {"devices": {}},
        "status": {"allocation": {"devices": {"results": [our_result(device)]}}},
    }
    for path, value in draw(st.lists(st.tuples(st.sampled_from(PATHS), json_values), max_size=3)):
        put_at(body, path, copy.deepcopy(value))
    extra = draw(st.sampled_from([None, "the same result again", "another request"]))
    if extra and (results := results_of(body)):
        results.append(copy.deepcopy(results[0]) if extra == "the same result again" else our_result("npu-7", "other"))
    return body


@FUZZ
@given(claim_bodies(), st.sampled_from(sorted(DRA_VERSIONS)))
def test_claims_of_random_shapes(
    served: Served, channels: dict[str, grpc.Channel], holder: str, body: dict[str, Any], version: str
) -> None:
    stored = served.api.put_object("ResourceClaim", body)
    ref = ("default", stored["metadata"]["name"], stored["metadata"]["uid"])
    try:
        answer = dra(channels, version, "Prepare", [ref]).claims[ref[2]]
        if not answer.error:
            # A claim of several requests is answered with one entry more, last: its last device again,
            # carrying only the claim-wide CDI id.
            devices = list(answer.devices)
            if devices[-1].request_names == [CLAIM_WIDE]:
                assert len(devices) > 2 and devices[-1].device_name == devices[-2].device_name, answer
                devices.pop()
            names = [d.device_name for d in devices]
            assert names and set(names) <= FREE_FOR_DRA and len(names) == len(set(names)), answer
            assert CLAIM_WIDE not in {n for d in devices for n in d.request_names}, answer
        check(served, holder)
    finally:  # each example starts from the same state, even after a failure
        assert dra(channels, version, "Unprepare", [ref]).claims[ref[2]].error == ""
        served.api.delete_object("ResourceClaim", ref[1])


# ---- registration


@FUZZ
@given(st.booleans(), texts | st.sampled_from(HUGE))
def test_registration_calls(
    served: Served, channels: dict[str, grpc.Channel], holder: str, registered: bool, error: str
) -> None:
    stub = reg_grpc.RegistrationStub(channels["reg"])
    status = reg_pb.RegistrationStatus(plugin_registered=registered, error=error)
    assert stub.NotifyRegistrationStatus(status, timeout=CALL_TIMEOUT) == reg_pb.RegistrationStatusResponse()
    assert stub.GetInfo(reg_pb.InfoRequest(), timeout=CALL_TIMEOUT).name == DRIVER
    check(served, holder)


# ---- bytes that are no message at all, at every method


UNARY = {
    "dp": [
        "/v1beta1.DevicePlugin/GetDevicePluginOptions",
        "/v1beta1.DevicePlugin/GetPreferredAllocation",
        "/v1beta1.DevicePlugin/Allocate",
        "/v1beta1.DevicePlugin/PreStartContainer",
    ],
    "dra": [
        f"/k8s.io.kubelet.pkg.apis.dra.{v}.DRAPlugin/Node{m}Resources"
        for v in DRA_VERSIONS
        for m in ("Prepare", "Unprepare")
    ],
    "reg": ["/pluginregistration.Registration/GetInfo", "/pluginregistration.Registration/NotifyRegistrationStatus"],
}
STREAMING = {"dp": "/v1beta1.DevicePlugin/ListAndWatch", "dra": "/v1alpha1.DRAResourceHealth/NodeWatchResources"}
METHODS = [(socket, m, False) for socket, methods in UNARY.items() for m in methods] + [
    (socket, m, True) for socket, m in STREAMING.items()
]
# gRPC answers a request it cannot decode with UNKNOWN naming protobuf's DecodeError, before our
# code runs; any other UNKNOWN would be an exception escaping our code.
UNDECODABLE = "Unexpected <class 'google.protobuf.message.DecodeError'>"


def call_raw(channel: grpc.Channel, method: str, streaming: bool, data: bytes) -> None:
    if not streaming:
        channel.unary_unary(method)(data, timeout=CALL_TIMEOUT)
        return
    call = channel.unary_stream(method)(data, timeout=CALL_TIMEOUT)
    try:
        next(call)  # the first complete list; the stream stays open until the daemon stops
    finally:
        call.cancel()


@FUZZ
@given(st.sampled_from(METHODS), st.binary(max_size=300))
def test_raw_bytes_at_every_method(
    served: Served, channels: dict[str, grpc.Channel], holder: str, method: tuple[str, str, bool], data: bytes
) -> None:
    socket, path, streaming = method
    code, details = status_of(lambda: call_raw(channels[socket], path, streaming, data))
    assert code in (OK, INVALID) or (code is grpc.StatusCode.UNKNOWN and details.startswith(UNDECODABLE)), details
    check(served, holder)


# ---- streams dropped at every moment, then: still serving


def test_streams_opened_and_dropped_in_every_way(
    served: Served, channels: dict[str, grpc.Channel], holder: str
) -> None:
    lists = dp_grpc.DevicePluginStub(channels["dp"]).ListAndWatch
    health = health_grpc.DRAResourceHealthStub(channels["dra"]).NodeWatchResources
    for round_ in range(30):
        streams = [lists(dp_pb.Empty()), health(health_pb.NodeWatchResourcesRequest())]
        for stream in streams[: round_ % 3]:  # some are read first, some are dropped unread
            next(stream)
        for stream in streams:
            stream.cancel()
    first = lists(dp_pb.Empty())
    assert {d.ID: d.health for d in next(first).devices} == dict.fromkeys(SERVED_BY_DP, "Healthy")
    first.cancel()
    check(served, holder)


def test_still_serving_after_all_of_it(served: Served, channels: dict[str, grpc.Channel], holder: str) -> None:
    request = dp_pb.AllocateRequest(container_requests=[dp_pb.ContainerAllocateRequest(devices_ids=["Ascend910-2"])])
    response = dp_grpc.DevicePluginStub(channels["dp"]).Allocate(request, timeout=CALL_TIMEOUT)
    assert response.container_responses[0].envs["ASCEND_VISIBLE_DEVICES"] == "2"
    claim = plant_claim(served.api, "after-the-fuzzing", None, [result("npu-7")])
    ref = ("default", claim.name, claim.uid)
    assert dra(channels, "v1", "Prepare", [ref]).claims[claim.uid].error == ""
    assert dra(channels, "v1", "Unprepare", [ref]).claims[claim.uid].error == ""
    check(served, holder)
    # gRPC itself logs the requests it could not decode (the raw bytes above); nothing else may fail
    # loudly.
    failures = [line for line in served.daemon.log().splitlines() if "Traceback" in line]
    assert all("grpc._cython.cygrpc: Unexpected [DecodeError] raised by servicer method" in f for f in failures)
