"""What the kubelet is told of a prepared claim, and what each kind of container then sees: a claim of
several requests must give a container of the whole claim all its NPUs, and a container of one request
only that request's."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.container_edits import HostLayout, Injection
from npu_plugin.ascend.vnpu import VnpuOrigin
from npu_plugin.cdi.spec import CdiSpec, claim_spec, qualified_name
from npu_plugin.dra.checkpoint import PreparedDevice, VnpuRecord
from npu_plugin.dra.claims import ClaimDevice
from npu_plugin.dra.prepare_results import kubelet_devices, prepared_devices, requests_of
from tests.support.dra import container_cdi_ids

DRIVER = "npu.huawei.com"
UID = "0c5a-41"
LAYOUT = HostLayout(dev_root="/dev", injection=Injection.NODES, common_nodes=(), driver_mounts=())


def claim(*devices: tuple[str, int]) -> tuple[PreparedDevice, ...]:
    """A claim's prepared devices, (request, physical id) each."""
    found = [ClaimDevice(request, "node-a", f"npu-{chip}", chip) for request, chip in devices]
    return prepared_devices(DRIVER, UID, found)


def seen_env(spec: CdiSpec, cdi_ids: list[str]) -> dict[str, str]:
    """The environment a CDI runtime builds from these ids, in order: a later device's variable replaces an
    earlier one's (the CDI library's ContainerEdits.Apply)."""
    edits = {qualified_name(DRIVER, d["name"]): d["containerEdits"] for d in spec["devices"]}
    env: dict[str, str] = {}
    for cdi_id in cdi_ids:
        for pair in edits[cdi_id].get("env", []):
            key, _, value = pair.partition("=")
            env[key] = value
    return env


@pytest.mark.parametrize(
    ("devices", "container", "visible"),
    [
        ((("npu", 3), ("npu", 1)), "", "1,3"),
        ((("npu", 3), ("npu", 1)), "npu", "1,3"),
        ((("a", 3), ("b", 1), ("b", 2)), "", "1,2,3"),
        ((("a", 3), ("b", 1), ("b", 2)), "a", "3"),
        ((("a", 3), ("b", 1), ("b", 2)), "b", "1,2"),
        ((("b", 5), ("a", 0), ("c", 7)), "", "0,5,7"),
        ((("b", 5), ("a", 0), ("c", 7)), "c", "7"),
    ],
    ids=["one-request-whole", "one-request-named", "two-whole", "two-first", "two-last", "three-whole", "three-last"],
)
def test_each_container_sees_the_npus_of_what_it_was_given(
    devices: tuple[tuple[str, int], ...], container: str, visible: str
) -> None:
    prepared = claim(*devices)
    whole, virtual = requests_of(prepared)
    spec = claim_spec(DRIVER, UID, whole, LAYOUT, virtual=virtual)
    ids = container_cdi_ids(kubelet_devices(DRIVER, UID, prepared), container)
    assert seen_env(spec, ids)["ASCEND_VISIBLE_DEVICES"] == visible


def test_one_request_is_answered_with_its_devices_alone() -> None:
    prepared = claim(("npu", 3), ("npu", 1))
    assert kubelet_devices(DRIVER, UID, prepared) == prepared


def test_several_requests_add_a_last_entry_only_a_whole_claim_container_gets() -> None:
    prepared = claim(("a", 3), ("b", 1))
    answered = kubelet_devices(DRIVER, UID, prepared)
    assert answered[:2] == prepared
    wide = answered[2]
    # The last device again, so the kubelet's health and PodResources name a device the claim holds.
    assert (wide.pool_name, wide.device_name, wide.physical_id) == ("node-a", "npu-1", 1)
    assert wide.request_names == ("_claim",)
    assert wide.cdi_device_ids == (f"{DRIVER}/npu={UID}-_claim",)
    assert container_cdi_ids(answered, "a") == [f"{DRIVER}/npu={UID}-a"]


def test_a_claim_holding_a_vnpu_gets_no_claim_wide_entry() -> None:
    found = [
        ClaimDevice("whole", "node-a", "npu-0", 0),
        ClaimDevice("v", "node-a", "npu-1-vir05-0", 1),
    ]
    vnpus = {"npu-1-vir05-0": VnpuRecord(1, "vir05_1c_16g", 100, VnpuOrigin.DYNAMIC)}
    prepared = prepared_devices(DRIVER, UID, found, vnpus)
    assert kubelet_devices(DRIVER, UID, prepared) == prepared


def test_no_devices_answer_no_devices() -> None:
    assert kubelet_devices(DRIVER, UID, ()) == ()
