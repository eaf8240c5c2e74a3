"""The fake inventory file rewritten with garbage while the daemon serves (both mode): random bytes,
random text, truncated YAML, and the real document with a wrong value somewhere. Writes go in place,
the way a careless writer makes them, so the daemon also reads empty and half-written files. It
keeps the last good inventory, keeps serving, and takes the next good file.

npu-smi output is fuzzed at the parser (tests/unit/backends/npusmi/test_parse.py: random and mutated
tables raise nothing but NpuSmiParseError) and the backend reads a failing npu-smi as Unknown
(test_npusmi_backend)."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as dp_pb
from npu_plugin._proto import deviceplugin_v1beta1_pb2_grpc as dp_grpc
from npu_plugin.backends.fake.inventory_file import inventory_document
from tests.support.daemon import wait_until, write_inventory
from tests.support.dra import node_slices, with_health
from tests.support.fake_devices import parse_inventory, profile_devices
from tests.support.serving import Served, serving

A2 = profile_devices("atlas-800t-a2")
GOOD = yaml.safe_dump(inventory_document(A2), sort_keys=False)
FIELDS = list(inventory_document(A2)["devices"][0])
values = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=10)
    | st.lists(st.integers(), max_size=2)
    | st.sampled_from(["-1", "1e9", "Fatal", "910Z", "64Xi", "0x10", "ring-x", "~", "[", "{}"])
)


@st.composite
def wrong_documents(draw: st.DrawFn) -> bytes:
    """The good inventory with one field of one device changed, or a device dropped, or the list
    gone."""
    document: dict[str, Any] = copy.deepcopy(inventory_document(A2))
    device = draw(st.sampled_from(document["devices"]))
    change = draw(st.sampled_from(["value", "drop-field", "devices-not-a-list", "duplicate"]))
    if change == "value":
        device[draw(st.sampled_from(FIELDS))] = draw(values)
    elif change == "drop-field":
        del device[draw(st.sampled_from(["physicalId", "chipName"]))]
    elif change == "devices-not-a-list":
        document["devices"] = draw(values)
    else:
        document["devices"].append(copy.deepcopy(device))
    return yaml.safe_dump(document, sort_keys=False).encode()


truncated = st.integers(0, len(GOOD) - 1).map(lambda cut: GOOD[:cut].encode())
rewrites = st.binary(max_size=2000) | st.text(max_size=500).map(str.encode) | truncated | wrong_documents()


def malformed(data: bytes) -> bool:
    """Whether the parser refuses `data` (in any way: whether it refuses it well is what the daemon
    shows)."""
    try:
        parse_inventory(data.decode("utf-8"), "fuzz")
    except Exception:
        return True
    return False


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with serving(tmp_path_factory.mktemp("fuzz-inventory")) as running:
        wait_until(lambda: len(node_slices(running.api)) == 1, 20, "the first slice")
        yield running


def listed(served: Served) -> dict[str, str]:
    with served.channel(served.dp_socket) as channel:
        stream = dp_grpc.DevicePluginStub(channel).ListAndWatch(dp_pb.Empty())
        devices = {d.ID: d.health for d in next(stream).devices}
        stream.cancel()
    return devices


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(rewrites)
def test_garbage_rewrites_while_serving(served: Served, data: bytes) -> None:
    """A good slice before, the same slice after: what the daemon serves does not move with
    garbage."""
    assume(malformed(data))
    served.workspace.inventory.write_bytes(data)
    time.sleep(0.02)  # a poll or a file event of the daemon sees it now and then, not every time
    served.check()


def test_the_last_good_inventory_is_still_served_and_the_next_good_one_taken(served: Served) -> None:
    slices = node_slices(served.api)
    wait_until(lambda: "inventory file rewrite rejected" in served.daemon.log(), 10, "the rejections logged")
    assert listed(served) == {f"Ascend910-{i}": "Healthy" for i in range(4)}
    assert [s["spec"]["devices"] for s in node_slices(served.api)] == [s["spec"]["devices"] for s in slices]
    assert [d["name"] for d in slices[0]["spec"]["devices"]] == [f"npu-{i}" for i in range(4, 8)]

    write_inventory(served.workspace.inventory, with_health(A2, {2}))
    wait_until(lambda: listed(served)["Ascend910-2"] == "Unhealthy", 10, "the next good file taken")
    write_inventory(served.workspace.inventory, A2)
    wait_until(lambda: listed(served)["Ascend910-2"] == "Healthy", 10, "recovery")
    served.check()


def test_a_stream_open_through_the_garbage_receives_nothing(served: Served) -> None:
    """No list differs while only garbage is written, so an open ListAndWatch stream gets its first
    list only."""
    received: list[dp_pb.ListAndWatchResponse] = []
    with served.channel(served.dp_socket) as channel:
        stream = dp_grpc.DevicePluginStub(channel).ListAndWatch(dp_pb.Empty())
        reader = threading.Thread(target=lambda: read_until_cancelled(stream, received))
        reader.start()
        wait_until(lambda: bool(received), 10, "the first list")
        for data in (b"", b"\xff\xfe", GOOD[: len(GOOD) // 2].encode(), b"devices: 7\n"):
            served.workspace.inventory.write_bytes(data)
            time.sleep(0.3)  # three polls of the daemon
        write_inventory(served.workspace.inventory, A2)
        time.sleep(0.3)
        stream.cancel()
        reader.join(10)
    assert len(received) == 1, received[1:]
    served.check()


def read_until_cancelled(stream: Any, into: list[dp_pb.ListAndWatchResponse]) -> None:
    try:
        for response in stream:
            into.append(response)
    except grpc.RpcError as error:
        assert error.code() is grpc.StatusCode.CANCELLED
