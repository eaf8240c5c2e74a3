"""A prepared claim's device metadata in KEP-5304's layout: paths, documents and mounts (pure), and
the removal of what a crash left."""

from __future__ import annotations

from pathlib import Path

from npu_plugin.ascend.vnpu import VnpuOrigin
from npu_plugin.dra.checkpoint import PreparedDevice, VnpuRecord
from npu_plugin.dra.device_metadata import (
    container_file,
    metadata_mounts,
    remove_orphans,
    request_documents,
    request_file,
)
from npu_plugin.dra.prepare_results import ClaimRef
from tests.support.fake_devices import profile_devices

DRIVER = "npu.huawei.com"
REF = ClaimRef("team", "0b7c0000-0000-4000-8000-000000000001", "train")
DEVICES = {d.physical_id: d for d in profile_devices("atlas-800t-a2")}


def prepared(request: str, name: str, physical_id: int, vnpu: VnpuRecord | None = None) -> PreparedDevice:
    return PreparedDevice((request,), "node-a", name, physical_id, (), vnpu)


def test_paths_follow_the_kep() -> None:
    plugin_dir = Path("/var/lib/kubelet/plugins/npu.huawei.com")
    assert request_file(plugin_dir, REF, "npu") == plugin_dir / "dra-device-metadata/team_train/npu/metadata.json"
    assert container_file(DRIVER, REF, "npu") == "/var/run/dra-device-attributes/train/npu/npu.huawei.com-metadata.json"
    (mount,) = metadata_mounts(plugin_dir, DRIVER, REF, ["npu"]).values()
    assert (mount.host_path, mount.container_path, mount.read_only) == (
        str(request_file(plugin_dir, REF, "npu")),
        container_file(DRIVER, REF, "npu"),
        True,
    )


def test_one_document_per_request_with_each_devices_attributes() -> None:
    vnpu = VnpuRecord(4, "vir05_1c_16g", 164, VnpuOrigin.DYNAMIC)
    devices = [
        prepared("train", "npu-1", 1),
        prepared("train", "npu-0", 0),
        prepared("small", "npu-4-vnpu-164", 4, vnpu),
    ]
    documents = request_documents(DRIVER, REF, devices, DEVICES.get)
    assert sorted(documents) == ["small", "train"]
    train = documents["train"]
    assert (train["apiVersion"], train["kind"]) == ("metadata.resource.k8s.io/v1alpha1", "DeviceMetadata")
    assert train["metadata"] == {"name": "train", "namespace": "team", "uid": REF.uid}
    (request,) = train["requests"]
    assert request["name"] == "train"
    assert [(d["name"], d["driver"], d["pool"]) for d in request["devices"]] == [
        ("npu-1", DRIVER, "node-a"),
        ("npu-0", DRIVER, "node-a"),
    ]
    assert request["devices"][0]["attributes"]["physicalId"] == {"int": 1}
    (small,) = documents["small"]["requests"][0]["devices"]
    assert (small["attributes"]["vnpuId"], small["attributes"]["vnpuTemplate"]) == (
        {"int": 164},
        {"string": "vir05_1c_16g"},
    )
    assert small["attributes"]["physicalId"] == {"int": 4}


def test_a_device_the_inventory_lost_is_left_out_of_its_request() -> None:
    documents = request_documents(DRIVER, REF, [prepared("npu", "npu-9", 9)], DEVICES.get)
    assert documents["npu"]["requests"] == [{"name": "npu", "devices": []}]


def test_orphans_are_the_claim_directories_no_prepared_claim_owns(tmp_path: Path) -> None:
    for name in ("team_train", "team_gone", "other_x"):
        (tmp_path / "dra-device-metadata" / name / "npu").mkdir(parents=True)
    removed = remove_orphans(tmp_path, [("team", "train")])
    assert sorted(p.name for p in removed) == ["other_x", "team_gone"]
    assert [p.name for p in (tmp_path / "dra-device-metadata").iterdir()] == ["team_train"]
    assert remove_orphans(tmp_path / "missing", []) == []
