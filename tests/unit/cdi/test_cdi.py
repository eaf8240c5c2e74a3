"""cdi/: CDI names, rendering, the lowest cdiVersion, the static and per-claim specs, their files —
all validated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.container_edits import (
    DRIVER_MOUNTS,
    ContainerEdits,
    DeviceNode,
    HostLayout,
    Injection,
    Mount,
    container_edits,
)
from npu_plugin.cdi.files import claim_spec_path, static_spec_path
from npu_plugin.cdi.spec import (
    CdiDevice,
    cdi_kind,
    claim_cdi_id,
    claim_device_name,
    claim_spec,
    claim_wide_ids,
    minimum_version,
    qualified_name,
    render_edits,
    render_spec,
    spec_bytes,
    static_cdi_id,
    static_spec,
    static_vnpu_cdi_id,
)
from tests.support.cdi_validation import assert_valid_cdi, cdi_problems
from tests.support.fake_devices import profile_devices

DRIVER = "npu.huawei.com"
ENV = (("ASCEND_VISIBLE_DEVICES", "0"),)


def edits(nodes: tuple[DeviceNode, ...] = (), mounts: tuple[Mount, ...] = ()) -> ContainerEdits:
    return ContainerEdits(env=ENV, device_nodes=nodes, mounts=mounts)


SAME_PATH = DeviceNode("/dev/davinci0", "/dev/davinci0")
HOST_PATH = DeviceNode("/host/dev/davinci0", "/dev/davinci0")
MOUNT = Mount("/usr/local/dcmi", "/usr/local/dcmi")


@pytest.mark.parametrize(
    ("devices", "common", "version"),
    [
        ([CdiDevice("npu-0", edits())], None, "0.3.0"),
        ([CdiDevice("npu-0", edits((SAME_PATH,)))], None, "0.3.0"),
        ([CdiDevice("npu-0", edits(mounts=(MOUNT,)))], None, "0.4.0"),
        ([CdiDevice("npu-0", edits((HOST_PATH,)))], None, "0.5.0"),
        ([CdiDevice("npu-0", edits((HOST_PATH,), (MOUNT,)))], None, "0.5.0"),
        ([CdiDevice("0a1b-npu", edits())], None, "0.5.0"),
        ([CdiDevice("npu-0", edits()), CdiDevice("7-npu", edits())], None, "0.5.0"),
        ([CdiDevice("npu-0", edits())], edits(mounts=(MOUNT,)), "0.4.0"),
        ([CdiDevice("npu-0", edits())], edits((HOST_PATH,)), "0.5.0"),
        ([], None, "0.3.0"),
    ],
    ids=[
        "env",
        "same-path-node",
        "mount-type",
        "host-path",
        "host-path-and-mount",
        "digit-name",
        "one-digit-name",
        "common-mount",
        "common-host-path",
        "no-devices",
    ],
)
def test_the_lowest_version_the_content_needs(
    devices: list[CdiDevice], common: ContainerEdits | None, version: str
) -> None:
    spec = render_spec(DRIVER, devices, common)
    assert spec["cdiVersion"] == version == minimum_version(spec)
    assert_valid_cdi(spec)


def test_rendered_edits_use_cdi_field_names() -> None:
    spec = render_spec(DRIVER, [CdiDevice("npu-0", edits((HOST_PATH, SAME_PATH), (MOUNT,)))])
    assert spec == {
        "cdiVersion": "0.5.0",
        "kind": "npu.huawei.com/npu",
        "devices": [
            {
                "name": "npu-0",
                "containerEdits": {
                    "env": ["ASCEND_VISIBLE_DEVICES=0"],
                    "deviceNodes": [
                        {"path": "/dev/davinci0", "hostPath": "/host/dev/davinci0", "permissions": "rw"},
                        {"path": "/dev/davinci0", "permissions": "rw"},
                    ],
                    "mounts": [
                        {
                            "hostPath": "/usr/local/dcmi",
                            "containerPath": "/usr/local/dcmi",
                            "type": "bind",
                            "options": ["ro", "nosuid", "nodev", "rbind"],
                        }
                    ],
                },
            }
        ],
    }
    assert json.loads(spec_bytes(spec)) == spec


def test_names_and_ids() -> None:
    assert cdi_kind(DRIVER) == "npu.huawei.com/npu"
    assert qualified_name(DRIVER, "npu-3") == "npu.huawei.com/npu=npu-3"
    assert static_cdi_id(DRIVER, 3) == "npu.huawei.com/npu=npu-3"
    assert static_vnpu_cdi_id(DRIVER, 164) == "npu.huawei.com/npu=vnpu-164"
    assert claim_device_name("u-1", "train") == "u-1-train"
    assert claim_cdi_id(DRIVER, "u-1", "train") == "npu.huawei.com/npu=u-1-train"
    assert claim_spec_path(Path("/var/run/cdi"), DRIVER, "u-1") == Path("/var/run/cdi/npu.huawei.com-claim_u-1.json")
    assert static_spec_path(Path("/var/run/cdi"), DRIVER) == Path("/var/run/cdi/npu.huawei.com-device-plugin.json")


LAYOUTS = {
    "nodes-under-host-dev": HostLayout("/host/dev", Injection.NODES, ("davinci_manager", "hisi_hdc"), ()),
    "nodes-in-dev": HostLayout("/dev", Injection.NODES, ("davinci_manager",), ()),
    "runtime": HostLayout("/dev", Injection.RUNTIME, ("davinci_manager",), ()),
    "mounts": HostLayout("/dev", Injection.NODES, (), DRIVER_MOUNTS),
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_static_spec_names_each_vnpu_after_the_npus_with_its_own_node(layout: HostLayout) -> None:
    devices = profile_devices("atlas-800t-a2")[:2]
    spec = static_spec(DRIVER, layout, devices, [180, 100])
    assert_valid_cdi(spec)
    assert [d["name"] for d in spec["devices"]] == ["npu-0", "npu-1", "vnpu-100", "vnpu-180"]
    vnpu = spec["devices"][2]["containerEdits"]
    if layout.injection is Injection.NODES:
        assert vnpu == {
            "deviceNodes": [
                {"path": "/dev/davinci100", "hostPath": f"{layout.dev_root}/vdavinci100", "permissions": "rw"}
            ]
        }
    else:
        assert vnpu == {}
    assert static_spec(DRIVER, layout, devices) == {
        **spec,
        "devices": spec["devices"][:2],
        "cdiVersion": static_spec(DRIVER, layout, devices)["cdiVersion"],
    }


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_claim_spec_has_a_device_per_request_with_that_requests_npus(layout: HostLayout) -> None:
    uid = "0c5a-41"
    spec = claim_spec(DRIVER, uid, {"train": [3, 1], "infer": [5]}, layout)
    assert_valid_cdi(spec)
    assert [d["name"] for d in spec["devices"]] == [f"{uid}-infer", f"{uid}-train", f"{uid}-_claim"]
    rendered = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert rendered[f"{uid}-train"]["env"] == ["ASCEND_VISIBLE_DEVICES=1,3"]
    # For a container given the whole claim: applied after the requests' devices, it names all their NPUs.
    assert rendered[f"{uid}-_claim"] == {"env": ["ASCEND_VISIBLE_DEVICES=1,3,5"]}
    expected = render_spec(DRIVER, [CdiDevice("x", container_edits(layout, [1, 3]))])["devices"][0]
    assert rendered[f"{uid}-train"] == expected["containerEdits"]
    assert spec["cdiVersion"] == "0.5.0"  # the name starts with a digit


@pytest.mark.parametrize(
    ("requests", "virtual", "expected"),
    [
        ({"npu": [3, 1]}, {}, []),
        ({"a": [3], "b": [1, 2]}, {}, [1, 2, 3]),
        ({"npu-0-share-1": [0], "npu-0-share-2": [0], "b": [4]}, {}, [0, 4]),
        ({"a": [3]}, {"v": [100]}, []),
        ({}, {"v": [100], "w": [101]}, []),
        ({}, {}, []),
    ],
    ids=["one-request", "two-requests", "shares-of-one-chip", "whole-and-vnpu", "two-vnpus", "empty"],
)
def test_claim_wide_ids_name_every_npu_only_for_several_requests_of_whole_npus(
    requests: dict[str, list[int]], virtual: dict[str, list[int]], expected: list[int]
) -> None:
    assert claim_wide_ids(requests, virtual) == expected


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_a_claim_spec_gives_a_vnpu_request_its_virtual_id(layout: HostLayout) -> None:
    spec = claim_spec(DRIVER, "0c5a", {"whole": [2]}, layout, virtual={"vnpu": [100]})
    assert_valid_cdi(spec)
    rendered = {d["name"]: d["containerEdits"] for d in spec["devices"]}
    assert rendered["0c5a-vnpu"] == render_edits(container_edits(layout, [100], virtual=True))
    assert rendered["0c5a-vnpu"]["env"] == ["ASCEND_VISIBLE_DEVICES=100", "ASCEND_RUNTIME_OPTIONS=VIRTUAL"]
    assert rendered["0c5a-whole"]["env"] == ["ASCEND_VISIBLE_DEVICES=2"]
    assert "ASCEND_VNPU_SPECS" not in json.dumps(spec)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"cdiVersion": "0.9.0"}, "not a released CDI version"),
        ({"cdiVersion": "0.3.0"}, "lower than the 0.5.0"),
        ({"kind": "npu"}, "is not vendor/class"),
        ({"kind": "npu.huawei.com/n.pu"}, "is not vendor/class"),
        ({"extra": 1}, "unknown spec field 'extra'"),
        ({"devices": [{"name": "-bad", "containerEdits": {}}]}, "not a valid CDI device name"),
        ({"devices": [{"name": "a", "containerEdits": {"envs": []}}]}, "unknown containerEdits field 'envs'"),
        ({"devices": [{"name": "a", "containerEdits": {"env": ["NOEQUALS"]}}]}, "is not KEY=VALUE"),
        ({"devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": "dev/x"}]}}]}, "must be absolute"),
        (
            {"devices": [{"name": "a", "containerEdits": {"deviceNodes": [{"path": "/dev/x", "permissions": "rwx"}]}}]},
            "permissions",
        ),
        ({"devices": [{"name": "a", "containerEdits": {}}, {"name": "a", "containerEdits": {}}]}, "duplicate"),
        ({"devices": "no"}, "schema:"),
    ],
)
def test_the_checks_catch_what_the_schema_misses(change: dict[str, Any], problem: str) -> None:
    spec = {**claim_spec(DRIVER, "0c5a", {"npu": [0]}, LAYOUTS["nodes-under-host-dev"]), **change}
    assert any(problem in p for p in cdi_problems(spec)), cdi_problems(spec)
