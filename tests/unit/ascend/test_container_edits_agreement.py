"""The two modes cannot drift: DP Allocate and the DRA CDI spec carry the same edits."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.ascend.container_edits import COMMON_NODES, DRIVER_MOUNTS, HostLayout, Injection, container_edits
from npu_plugin.cdi.spec import claim_spec
from npu_plugin.deviceplugin.service import container_response

Edits = tuple[frozenset[tuple[str, str]], tuple[tuple[str, str, str], ...], tuple[tuple[str, str, bool], ...]]

layouts = st.builds(
    HostLayout,
    dev_root=st.sampled_from(["/dev", "/host/dev", "/tmp/x/dev/"]),
    injection=st.sampled_from(list(Injection)),
    common_nodes=st.lists(st.sampled_from(COMMON_NODES), unique=True).map(tuple),
    driver_mounts=st.lists(st.sampled_from(DRIVER_MOUNTS), unique=True).map(tuple),
)
device_ids = st.sets(st.integers(0, 15), min_size=1, max_size=8)


def from_allocate(response: pb.ContainerAllocateResponse) -> Edits:
    return (
        frozenset(response.envs.items()),
        tuple((d.host_path, d.container_path, d.permissions) for d in response.devices),
        tuple((m.host_path, m.container_path, m.read_only) for m in response.mounts),
    )


def from_cdi(edits: dict[str, Any]) -> Edits:
    return (
        frozenset(tuple(e.split("=", 1)) for e in edits.get("env", [])),  # type: ignore[misc]
        tuple((n.get("hostPath", n["path"]), n["path"], n["permissions"]) for n in edits.get("deviceNodes", [])),
        tuple((m["hostPath"], m["containerPath"], "ro" in m["options"]) for m in edits.get("mounts", [])),
    )


@given(layout=layouts, ids=device_ids)
def test_allocate_and_cdi_carry_the_same_edits(layout: HostLayout, ids: set[int]) -> None:
    allocate = container_response(container_edits(layout, ids), cdi_ids=())
    [device] = claim_spec("npu.huawei.com", "uid", {"npu": sorted(ids, reverse=True)}, layout)["devices"]
    assert from_allocate(allocate) == from_cdi(device["containerEdits"])


def test_the_comparison_sees_a_difference() -> None:
    layout = HostLayout("/host/dev", Injection.NODES, ("hisi_hdc",), ())
    allocate = container_response(container_edits(layout, {1, 2}), cdi_ids=())
    [device] = claim_spec("npu.huawei.com", "uid", {"npu": [1]}, layout)["devices"]
    assert from_allocate(allocate) != from_cdi(device["containerEdits"])
