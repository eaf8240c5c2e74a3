"""container_edits, the one source of what a container gets, and the host probe."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_plugin.ascend.container_edits import (
    DRIVER_MOUNTS,
    ContainerEdits,
    DeviceNode,
    HostLayout,
    Injection,
    Mount,
    container_edits,
    probe_host,
    split_edits,
)

COMMON = ("davinci_manager", "devmm_svm", "hisi_hdc")


def layout(
    injection: Injection = Injection.NODES, common: tuple[str, ...] = COMMON, mounts: tuple[str, ...] = ()
) -> HostLayout:
    return HostLayout(dev_root="/host/dev/", injection=injection, common_nodes=common, driver_mounts=mounts)


def test_nodes_injection_gives_env_device_nodes_and_common_nodes() -> None:
    assert container_edits(layout(), [3, 1]) == ContainerEdits(
        env=(("ASCEND_VISIBLE_DEVICES", "1,3"),),
        device_nodes=(
            DeviceNode("/host/dev/davinci1", "/dev/davinci1", "rw"),
            DeviceNode("/host/dev/davinci3", "/dev/davinci3", "rw"),
            DeviceNode("/host/dev/davinci_manager", "/dev/davinci_manager", "rw"),
            DeviceNode("/host/dev/devmm_svm", "/dev/devmm_svm", "rw"),
            DeviceNode("/host/dev/hisi_hdc", "/dev/hisi_hdc", "rw"),
        ),
        mounts=(),
    )


@pytest.mark.parametrize(
    ("ids", "visible"),
    [([0], "0"), ([7, 0, 10, 2], "0,2,7,10"), ([4, 4], "4")],
)
def test_visible_devices_are_ascending_and_unique(ids: list[int], visible: str) -> None:
    assert container_edits(layout(), ids).env == (("ASCEND_VISIBLE_DEVICES", visible),)


def test_runtime_injection_gives_env_only() -> None:
    edits = container_edits(layout(Injection.RUNTIME), [5])
    assert edits == ContainerEdits(env=(("ASCEND_VISIBLE_DEVICES", "5"),), device_nodes=(), mounts=())


def test_only_existing_common_nodes_are_injected() -> None:
    nodes = container_edits(layout(common=("hisi_hdc",)), [0]).device_nodes
    assert [n.container_path for n in nodes] == ["/dev/davinci0", "/dev/hisi_hdc"]


def test_driver_mounts_are_read_only_binds_at_the_same_path() -> None:
    edits = container_edits(layout(mounts=DRIVER_MOUNTS), [0])
    assert edits.mounts == tuple(Mount(p, p, read_only=True) for p in DRIVER_MOUNTS)
    assert [m.host_path for m in edits.mounts] == [
        "/usr/local/Ascend/driver/lib64",
        "/usr/local/Ascend/driver/include",
        "/usr/local/dcmi",
        "/usr/local/bin/npu-smi",
    ]


def test_probe_host_finds_common_nodes_under_dev_root(tmp_path: Path) -> None:
    (tmp_path / "davinci_manager").touch()
    (tmp_path / "hisi_hdc").touch()
    probed = probe_host(tmp_path, Injection.NODES, mount_driver=False)
    assert probed == HostLayout(str(tmp_path), Injection.NODES, ("davinci_manager", "hisi_hdc"), ())


def test_probe_host_mounts_only_existing_driver_paths_and_only_when_asked(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    (host / "usr/local/bin").mkdir(parents=True)
    (host / "usr/local/bin/npu-smi").touch()
    found = probe_host(tmp_path, Injection.NODES, mount_driver=True, host_root=host).driver_mounts
    assert found == ("/usr/local/Ascend/driver/lib64", "/usr/local/bin/npu-smi"), "host paths, not the stand-in's"
    assert probe_host(tmp_path, Injection.NODES, mount_driver=False, host_root=host).driver_mounts == ()
    assert probe_host(tmp_path, Injection.NODES, mount_driver=True, host_root=tmp_path / "empty").driver_mounts == ()


def test_probe_host_looks_at_the_real_host_by_default(tmp_path: Path) -> None:
    existing = tuple(p for p in DRIVER_MOUNTS if Path(p).exists())
    assert probe_host(tmp_path, Injection.NODES, mount_driver=True).driver_mounts == existing


@pytest.mark.parametrize(
    "host",
    [layout(), layout(Injection.RUNTIME), layout(common=(), mounts=DRIVER_MOUNTS), layout(mounts=DRIVER_MOUNTS)],
    ids=["nodes", "runtime", "mounts-only", "nodes-and-mounts"],
)
@pytest.mark.parametrize("ids", [[3], [3, 1], []], ids=["one", "two", "none"])
@pytest.mark.parametrize("virtual", [False, True], ids=["whole", "vnpu"])
def test_split_edits_are_container_edits_in_parts_without_the_env(
    host: HostLayout, ids: list[int], virtual: bool
) -> None:
    per_device, common = split_edits(host, ids, virtual=virtual)
    whole = container_edits(host, ids, virtual=virtual)
    assert set(per_device) == set(ids)
    assert not common.env and all(not part.env and not part.mounts for part in per_device.values())
    if ids:
        parts = [per_device[i] for i in sorted(ids)]
        assert tuple(n for part in [*parts, common] for n in part.device_nodes) == whole.device_nodes
        assert common.mounts == whole.mounts
    if host.injection is Injection.NODES:
        assert [n.container_path for i in ids for n in per_device[i].device_nodes] == [f"/dev/davinci{i}" for i in ids]


def test_a_vnpu_is_its_vdavinci_node_seen_as_davinci_with_the_virtual_runtime_option() -> None:
    assert container_edits(layout(common=("hisi_hdc",)), [164], virtual=True) == ContainerEdits(
        env=(("ASCEND_VISIBLE_DEVICES", "164"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL")),
        device_nodes=(
            DeviceNode("/host/dev/vdavinci164", "/dev/davinci164"),
            DeviceNode("/host/dev/hisi_hdc", "/dev/hisi_hdc"),
        ),
        mounts=(),
    )


def test_a_vnpu_with_runtime_injection_is_env_only() -> None:
    edits = container_edits(layout(Injection.RUNTIME), [100], virtual=True)
    assert edits.env == (("ASCEND_VISIBLE_DEVICES", "100"), ("ASCEND_RUNTIME_OPTIONS", "VIRTUAL"))
    assert edits.device_nodes == ()
