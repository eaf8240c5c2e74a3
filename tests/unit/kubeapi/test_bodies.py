"""kube.py reads every response body in one place: what it accepts, and the one error for everything
else."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.bodies import (
    MalformedError,
    checked_response,
    decode_object,
    parse_event,
    parse_slice,
    parse_slice_list,
)

SLICE: dict[str, Any] = {
    "metadata": {"name": "node-a-npu-x", "resourceVersion": "7", "ownerReferences": [{"uid": "u"}]},
    "spec": {
        "driver": "npu.huawei.com",
        "nodeName": "node-a",
        "pool": {"name": "node-a", "generation": 2, "resourceSliceCount": 1},
        "devices": [{"name": "npu-0", "attributes": {"physicalId": {"int": 0}}, "capacity": {}}],
    },
}


def with_(path: str, value: Any) -> dict[str, Any]:
    """SLICE with the field at dotted `path` replaced (or removed, for value ...)."""
    changed = copy.deepcopy(SLICE)
    *parents, last = path.split(".")
    target = changed
    for key in parents:
        target = target[key]
    if value is ...:
        del target[last]
    else:
        target[last] = value
    return changed


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"<html>502 Bad Gateway</html>", "not JSON: '<html>502 Bad Gateway</html>'"),
        (b"", "not JSON: ''"),
        (b"\xff\xfe", "not JSON"),
        (b"[1, 2]", "the body is not an object but [1, 2]"),
        (b'"text"', "the body is not an object"),
    ],
)
def test_a_body_that_is_not_a_json_object_is_malformed(body: bytes, why: str) -> None:
    with pytest.raises(MalformedError, match="^" + why.replace("[", r"\[").replace("]", r"\]")):
        decode_object(body)


def test_a_long_body_is_quoted_clipped() -> None:
    with pytest.raises(MalformedError) as caught:
        decode_object(b"x" * 100_000)
    assert len(str(caught.value)) < 200


@pytest.mark.parametrize(
    ("slice_", "why"),
    [
        (with_("metadata", ...), "s.metadata is not an object"),
        (with_("metadata.name", ...), "s.metadata.name is missing or not a string"),
        (with_("metadata.resourceVersion", 7), "s.metadata.resourceVersion is missing or not a string"),
        (with_("metadata.ownerReferences", {"uid": "u"}), "s.metadata.ownerReferences is not a list"),
        (with_("spec.pool.generation", "2"), "s.spec.pool.generation is not an integer"),
        (with_("spec.devices", {}), "s.spec.devices is not a list"),
        (with_("spec.devices", [{"attributes": {}}]), r"s.spec.devices\[0\].name is missing"),
        (with_("spec.devices", [{"name": "npu-0", "capacity": []}]), r"s.spec.devices\[0\].capacity is not an object"),
        (with_("spec.driver", None), "s.spec.driver is missing"),
    ],
)
def test_a_slice_missing_what_we_rely_on_is_malformed(slice_: dict[str, Any], why: str) -> None:
    with pytest.raises(MalformedError, match=why):
        parse_slice(slice_, "s")


def test_an_empty_device_list_omitted_by_the_server_reads_as_empty() -> None:
    parsed = parse_slice(with_("spec.devices", ...), "s")
    assert parsed["spec"]["devices"] == []
    assert parse_slice(SLICE, "s") == SLICE


def test_a_list_carries_its_resource_version() -> None:
    listed = parse_slice_list({"metadata": {"resourceVersion": "12"}, "items": [SLICE]})
    assert (listed.resource_version, len(listed.items)) == ("12", 1)
    with pytest.raises(MalformedError, match=r"the list\.items is not a list"):
        parse_slice_list({"metadata": {"resourceVersion": "12"}, "items": {}})
    with pytest.raises(MalformedError, match=r"items\[0\].spec is not an object"):
        parse_slice_list({"metadata": {"resourceVersion": "12"}, "items": [with_("spec", 3)]})


def test_watch_events() -> None:
    assert parse_event({"type": "DELETED", "object": SLICE}).resource_version == "7"
    bookmark = parse_event({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}})
    assert (bookmark.type, bookmark.resource_version, bookmark.object) == ("BOOKMARK", "9", None)
    with pytest.raises(MalformedError, match="unknown watch event type 'SURPRISE'"):
        parse_event({"type": "SURPRISE", "object": SLICE})


def test_an_error_event_is_the_api_error_it_carries() -> None:
    with pytest.raises(KubeApiError) as caught:
        parse_event({"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old resource version"}})
    assert caught.value.status == 410
    assert "too old resource version" in str(caught.value)


def test_malformed_becomes_the_error_of_the_call() -> None:
    with pytest.raises(KubeApiError) as caught:
        checked_response("list resourceslices", 200, lambda: decode_object(b"<html>"))
    assert caught.value.status == 200
    assert str(caught.value) == "list resourceslices: HTTP 200: malformed response: not JSON: '<html>'"
