"""Wire contracts: generated modules are fresh, field numbers and method paths match the kubelet."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from types import ModuleType
from typing import TypeVar

import grpc
import pytest
from google.protobuf import descriptor_pool
from google.protobuf.message import Message

from npu_plugin._proto import (
    deviceplugin_v1beta1_pb2,
    deviceplugin_v1beta1_pb2_grpc,
    dra_health_v1_pb2,
    dra_health_v1alpha1_pb2,
    dra_health_v1alpha1_pb2_grpc,
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_v1_pb2,
    pluginregistration_v1_pb2_grpc,
    podresources_v1_pb2,
    podresources_v1_pb2_grpc,
)

REPO = Path(__file__).resolve().parents[2]
GEN_PROTOS = REPO / "scripts" / "gen-protos"


# --- hand-written protobuf wire encoding, independent of the generated code ---


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _varint(field: int, value: int) -> bytes:
    """Wire type 0 (int32/int64/bool/enum)."""
    return _uvarint(field << 3) + _uvarint(value)


def _ld(field: int, payload: bytes | str) -> bytes:
    """Wire type 2 (string/bytes/embedded message/map entry)."""
    data = payload.encode() if isinstance(payload, str) else payload
    return _uvarint(field << 3 | 2) + _uvarint(len(data)) + data


def _map_entry(field: int, key: str, value: bytes | str) -> bytes:
    return _ld(field, _ld(1, key) + _ld(2, value))


M = TypeVar("M", bound=Message)


def _roundtrip(cls: type[M], wire: bytes) -> M:
    """Parses wire, and checks that re-encoding (fields in number order) gives the same bytes."""
    message = cls.FromString(wire)
    assert message.SerializeToString(deterministic=True) == wire
    return message


# --- (a) generated code is up to date ---


def test_generated_code_matches_proto_sources() -> None:
    result = subprocess.run([GEN_PROTOS, "--check"], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def _copy_generator_tree(dest: Path) -> None:
    shutil.copytree(REPO / "proto", dest / "proto")
    shutil.copytree(
        REPO / "npu_plugin" / "_proto", dest / "npu_plugin" / "_proto", ignore=shutil.ignore_patterns("__pycache__")
    )
    (dest / "scripts").mkdir()
    shutil.copy2(GEN_PROTOS, dest / "scripts" / "gen-protos")
    (dest / ".venv").symlink_to(REPO / ".venv")


def test_check_mode_reports_stale_output_and_regeneration_is_deterministic(tmp_path: Path) -> None:
    _copy_generator_tree(tmp_path)
    script = tmp_path / "scripts" / "gen-protos"
    with (tmp_path / "proto" / "dra_v1.proto").open("a") as proto:
        proto.write("\nmessage AddedByTest {}\n")
    stale = subprocess.run([script, "--check"], capture_output=True, text=True, check=False)
    assert stale.returncode == 1
    assert "stale" in stale.stderr

    subprocess.run([script], capture_output=True, check=True)
    first = {p.name: p.read_bytes() for p in (tmp_path / "npu_plugin" / "_proto").iterdir() if p.is_file()}
    subprocess.run([script], capture_output=True, check=True)
    second = {p.name: p.read_bytes() for p in (tmp_path / "npu_plugin" / "_proto").iterdir() if p.is_file()}
    assert first == second
    assert b"_ADDEDBYTEST" in first["dra_v1_pb2.py"]
    assert b"class AddedByTest" in first["dra_v1_pb2.pyi"]


def test_check_mode_rejects_unknown_arguments() -> None:
    result = subprocess.run([GEN_PROTOS, "--bogus"], capture_output=True, text=True, check=False)
    assert result.returncode == 2


# --- (b) field numbers, proven by decoding hand-written bytes ---


def test_deviceplugin_device_literal_bytes() -> None:
    wire = (
        b"\x0a\x0bAscend910-0"  # field 1 (ID), length 11
        b"\x12\x07Healthy"  # field 2 (health), length 7
        b"\x1a\x04"  # field 3 (topology), length 4
        b"\x0a\x02\x08\x01"  # topology.nodes[0] (field 1) = NUMANode{ID (field 1) = 1}
    )
    device = _roundtrip(deviceplugin_v1beta1_pb2.Device, wire)
    assert device.ID == "Ascend910-0"
    assert device.health == "Healthy"
    assert [node.ID for node in device.topology.nodes] == [1]


def test_deviceplugin_register_request() -> None:
    wire = (
        _ld(1, "v1beta1") + _ld(2, "npu.sock") + _ld(3, "huawei.com/Ascend910") + _ld(4, _varint(1, 1) + _varint(2, 1))
    )
    request = _roundtrip(deviceplugin_v1beta1_pb2.RegisterRequest, wire)
    assert (request.version, request.endpoint, request.resource_name) == (
        "v1beta1",
        "npu.sock",
        "huawei.com/Ascend910",
    )
    assert request.options.pre_start_required
    assert request.options.get_preferred_allocation_available


def test_deviceplugin_allocate_request_and_response() -> None:
    request = _roundtrip(
        deviceplugin_v1beta1_pb2.AllocateRequest,
        _ld(1, _ld(1, "Ascend910-0") + _ld(1, "Ascend910-1")),
    )
    assert list(request.container_requests[0].devices_ids) == ["Ascend910-0", "Ascend910-1"]

    container = (
        _map_entry(1, "ASCEND_VISIBLE_DEVICES", "0,1")
        + _map_entry(1, "ASCEND_RUNTIME_OPTIONS", "")
        + _ld(2, _ld(1, "/usr/local/Ascend/driver") + _ld(2, "/usr/local/Ascend/driver") + _varint(3, 1))
        + _ld(3, _ld(1, "/dev/davinci0") + _ld(2, "/dev/davinci0") + _ld(3, "rw"))
        + _map_entry(4, "huawei.com/npu", "0")
        + _ld(5, _ld(1, "huawei.com/npu=0"))
    )
    response = deviceplugin_v1beta1_pb2.AllocateResponse.FromString(_ld(1, container))
    (answer,) = response.container_responses
    assert dict(answer.envs) == {"ASCEND_VISIBLE_DEVICES": "0,1", "ASCEND_RUNTIME_OPTIONS": ""}
    assert (answer.mounts[0].host_path, answer.mounts[0].read_only) == ("/usr/local/Ascend/driver", True)
    assert (answer.devices[0].container_path, answer.devices[0].permissions) == ("/dev/davinci0", "rw")
    assert dict(answer.annotations) == {"huawei.com/npu": "0"}
    assert [cdi.name for cdi in answer.cdi_devices] == ["huawei.com/npu=0"]


def test_deviceplugin_preferred_allocation() -> None:
    wire = _ld(1, _ld(1, "a") + _ld(1, "b") + _ld(1, "c") + _ld(2, "b") + _varint(3, 2))
    request = _roundtrip(deviceplugin_v1beta1_pb2.PreferredAllocationRequest, wire)
    (one,) = request.container_requests
    assert (list(one.available_deviceIDs), list(one.must_include_deviceIDs), one.allocation_size) == (
        ["a", "b", "c"],
        ["b"],
        2,
    )
    response = _roundtrip(deviceplugin_v1beta1_pb2.PreferredAllocationResponse, _ld(1, _ld(1, "b")))
    assert list(response.container_responses[0].deviceIDs) == ["b"]


@pytest.mark.parametrize("module", [dra_v1_pb2, dra_v1beta1_pb2], ids=["v1", "v1beta1"])
def test_dra_prepare_request_and_response(module: ModuleType) -> None:
    claim = _ld(1, "team-a") + _ld(2, "4c6b-uid") + _ld(3, "npu-claim")
    request = _roundtrip(module.NodePrepareResourcesRequest, _ld(1, claim))
    (decoded,) = request.claims
    assert (decoded.namespace, decoded.uid, decoded.name) == ("team-a", "4c6b-uid", "npu-claim")

    device = _ld(1, "npus") + _ld(2, "node-1") + _ld(3, "npu-0") + _ld(4, "npu.huawei.com/npu=npu-0")
    failed = _ld(2, "device npu-1 is unhealthy")
    wire = _map_entry(1, "4c6b-uid", _ld(1, device)) + _map_entry(1, "9d2e-uid", failed)
    response = module.NodePrepareResourcesResponse.FromString(wire)
    (prepared,) = response.claims["4c6b-uid"].devices
    assert list(prepared.request_names) == ["npus"]
    assert (prepared.pool_name, prepared.device_name) == ("node-1", "npu-0")
    assert list(prepared.cdi_device_ids) == ["npu.huawei.com/npu=npu-0"]
    assert response.claims["4c6b-uid"].error == ""
    assert response.claims["9d2e-uid"].error == "device npu-1 is unhealthy"


@pytest.mark.parametrize("module", [dra_v1_pb2, dra_v1beta1_pb2], ids=["v1", "v1beta1"])
def test_dra_unprepare_response(module: ModuleType) -> None:
    response = module.NodeUnprepareResourcesResponse.FromString(
        _map_entry(1, "4c6b-uid", b"") + _map_entry(1, "9d2e-uid", _ld(1, "busy")),
    )
    assert {uid: entry.error for uid, entry in response.claims.items()} == {"4c6b-uid": "", "9d2e-uid": "busy"}


def test_pluginregistration_messages() -> None:
    info = _roundtrip(
        pluginregistration_v1_pb2.PluginInfo,
        _ld(1, "DRAPlugin")
        + _ld(2, "npu.huawei.com")
        + _ld(3, "/var/lib/kubelet/plugins/npu.huawei.com/dra.sock")
        + _ld(4, "v1.DRAPlugin")
        + _ld(4, "v1beta1.DRAPlugin"),
    )
    assert (info.type, info.name) == ("DRAPlugin", "npu.huawei.com")
    assert info.endpoint == "/var/lib/kubelet/plugins/npu.huawei.com/dra.sock"
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]

    # plugin_registered=false is the proto3 default, so it is absent from the wire.
    status = _roundtrip(pluginregistration_v1_pb2.RegistrationStatus, _ld(2, "version skew"))
    assert (status.plugin_registered, status.error) == (False, "version skew")
    assert _roundtrip(pluginregistration_v1_pb2.RegistrationStatus, _varint(1, 1)).plugin_registered


def test_podresources_list_response() -> None:
    topology = _ld(1, _varint(1, 1))
    dp_devices = _ld(1, "huawei.com/Ascend910") + _ld(2, "Ascend910-0") + _ld(2, "Ascend910-1") + _ld(3, topology)
    cdi = _ld(1, _ld(1, "npu.huawei.com/npu=npu-2"))
    claim_resource = cdi + _ld(2, "npu.huawei.com") + _ld(3, "node-1") + _ld(4, "npu-2")
    dynamic = _ld(2, "npu-claim") + _ld(3, "team-a") + _ld(4, claim_resource)
    memory = _ld(1, "hugepages-1Gi") + _varint(2, 1 << 30) + _ld(3, topology)
    container = _ld(1, "trainer") + _ld(2, dp_devices) + _ld(3, _uvarint(4)) + _ld(4, memory) + _ld(5, dynamic)
    pod = _ld(1, "job-0") + _ld(2, "team-a") + _ld(3, container)
    response = _roundtrip(podresources_v1_pb2.ListPodResourcesResponse, _ld(1, pod))

    (decoded_pod,) = response.pod_resources
    assert (decoded_pod.name, decoded_pod.namespace) == ("job-0", "team-a")
    (decoded,) = decoded_pod.containers
    assert decoded.name == "trainer"
    assert decoded.devices[0].resource_name == "huawei.com/Ascend910"
    assert list(decoded.devices[0].device_ids) == ["Ascend910-0", "Ascend910-1"]
    assert [node.ID for node in decoded.devices[0].topology.nodes] == [1]
    assert list(decoded.cpu_ids) == [4]
    assert (decoded.memory[0].memory_type, decoded.memory[0].size) == ("hugepages-1Gi", 1 << 30)
    (claim,) = decoded.dynamic_resources
    assert (claim.claim_name, claim.claim_namespace) == ("npu-claim", "team-a")
    (device,) = claim.claim_resources
    assert (device.driver_name, device.pool_name, device.device_name) == ("npu.huawei.com", "node-1", "npu-2")
    assert [cdi.name for cdi in device.cdi_devices] == ["npu.huawei.com/npu=npu-2"]


def test_podresources_get_and_allocatable() -> None:
    request = _roundtrip(podresources_v1_pb2.GetPodResourcesRequest, _ld(1, "job-0") + _ld(2, "team-a"))
    assert (request.pod_name, request.pod_namespace) == ("job-0", "team-a")
    got = _roundtrip(podresources_v1_pb2.GetPodResourcesResponse, _ld(1, _ld(1, "job-0")))
    assert got.pod_resources.name == "job-0"
    allocatable = _roundtrip(
        podresources_v1_pb2.AllocatableResourcesResponse,
        _ld(1, _ld(1, "huawei.com/Ascend910") + _ld(2, "Ascend910-0")) + _ld(2, _uvarint(0) + _uvarint(1)),
    )
    assert list(allocatable.devices[0].device_ids) == ["Ascend910-0"]
    assert list(allocatable.cpu_ids) == [0, 1]  # proto3 packs repeated scalars


@pytest.mark.parametrize("module", [dra_health_v1alpha1_pb2, dra_health_v1_pb2], ids=["v1alpha1", "v1"])
def test_dra_health_watch_response(module: ModuleType) -> None:
    healthy = _ld(1, _ld(1, "node-1") + _ld(2, "npu-0")) + _varint(2, 1) + _varint(3, 1_750_000_000)
    unhealthy = (
        _ld(1, _ld(1, "node-1") + _ld(2, "npu-1"))
        + _varint(2, 2)
        + _varint(3, 1_750_000_005)
        + _varint(4, 30)
        + _ld(5, "HBM ECC errors")
    )
    response = _roundtrip(module.NodeWatchResourcesResponse, _ld(1, healthy) + _ld(1, unhealthy))
    first, second = response.devices
    assert (first.device.pool_name, first.device.device_name) == ("node-1", "npu-0")
    assert first.health == module.HEALTHY
    assert first.last_updated_time == 1_750_000_000
    assert (second.device.device_name, second.health) == ("npu-1", module.UNHEALTHY)
    assert (second.health_check_timeout_seconds, second.message) == (30, "HBM ECC errors")
    assert module.HealthStatus.Name(0) == "UNKNOWN"


# --- (c) service names and method paths as the kubelet calls them ---

KUBELET_METHOD_PATHS = {
    # device plugin: the plugin calls the kubelet's Registration, the kubelet calls DevicePlugin
    "/v1beta1.Registration/Register": ("v1beta1.RegisterRequest", "v1beta1.Empty", False),
    "/v1beta1.DevicePlugin/GetDevicePluginOptions": ("v1beta1.Empty", "v1beta1.DevicePluginOptions", False),
    "/v1beta1.DevicePlugin/ListAndWatch": ("v1beta1.Empty", "v1beta1.ListAndWatchResponse", True),
    "/v1beta1.DevicePlugin/GetPreferredAllocation": (
        "v1beta1.PreferredAllocationRequest",
        "v1beta1.PreferredAllocationResponse",
        False,
    ),
    "/v1beta1.DevicePlugin/Allocate": ("v1beta1.AllocateRequest", "v1beta1.AllocateResponse", False),
    "/v1beta1.DevicePlugin/PreStartContainer": (
        "v1beta1.PreStartContainerRequest",
        "v1beta1.PreStartContainerResponse",
        False,
    ),
    # plugin watcher registration (DRA)
    "/pluginregistration.Registration/GetInfo": (
        "pluginregistration.InfoRequest",
        "pluginregistration.PluginInfo",
        False,
    ),
    "/pluginregistration.Registration/NotifyRegistrationStatus": (
        "pluginregistration.RegistrationStatus",
        "pluginregistration.RegistrationStatusResponse",
        False,
    ),
    # DRA kubelet plugin
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources": (
        "k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesRequest",
        "k8s.io.kubelet.pkg.apis.dra.v1.NodePrepareResourcesResponse",
        False,
    ),
    "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodeUnprepareResources": (
        "k8s.io.kubelet.pkg.apis.dra.v1.NodeUnprepareResourcesRequest",
        "k8s.io.kubelet.pkg.apis.dra.v1.NodeUnprepareResourcesResponse",
        False,
    ),
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodePrepareResources": (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.NodePrepareResourcesRequest",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.NodePrepareResourcesResponse",
        False,
    ),
    "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources": (
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.NodeUnprepareResourcesRequest",
        "k8s.io.kubelet.pkg.apis.dra.v1beta1.NodeUnprepareResourcesResponse",
        False,
    ),
    # DRA device health
    "/v1alpha1.DRAResourceHealth/NodeWatchResources": (
        "v1alpha1.NodeWatchResourcesRequest",
        "v1alpha1.NodeWatchResourcesResponse",
        True,
    ),
    "/v1.DRAResourceHealth/NodeWatchResources": (
        "v1.NodeWatchResourcesRequest",
        "v1.NodeWatchResourcesResponse",
        True,
    ),
    # pod resources (served by the kubelet)
    "/v1.PodResourcesLister/List": ("v1.ListPodResourcesRequest", "v1.ListPodResourcesResponse", False),
    "/v1.PodResourcesLister/GetAllocatableResources": (
        "v1.AllocatableResourcesRequest",
        "v1.AllocatableResourcesResponse",
        False,
    ),
    "/v1.PodResourcesLister/Get": ("v1.GetPodResourcesRequest", "v1.GetPodResourcesResponse", False),
}


@pytest.mark.parametrize("path", sorted(KUBELET_METHOD_PATHS))
def test_method_path_in_descriptor_pool(path: str) -> None:
    service_name, method_name = path.removeprefix("/").split("/")
    method = descriptor_pool.Default().FindServiceByName(service_name).methods_by_name[method_name]
    request, response, server_streaming = KUBELET_METHOD_PATHS[path]
    assert (method.input_type.full_name, method.output_type.full_name) == (request, response)
    assert method.server_streaming is server_streaming
    assert method.client_streaming is False


def test_no_other_services_or_methods() -> None:
    pool = descriptor_pool.Default()
    services = {path.removeprefix("/").split("/")[0] for path in KUBELET_METHOD_PATHS}
    served = {f"/{name}/{method.name}" for name in services for method in pool.FindServiceByName(name).methods}
    assert served == set(KUBELET_METHOD_PATHS)


def test_modules_register_distinct_files() -> None:
    modules = [
        deviceplugin_v1beta1_pb2,
        pluginregistration_v1_pb2,
        dra_v1_pb2,
        dra_v1beta1_pb2,
        dra_health_v1alpha1_pb2,
        dra_health_v1_pb2,
        podresources_v1_pb2,
    ]
    names = [module.DESCRIPTOR.name for module in modules]
    assert all(name.startswith("npu_plugin/_proto/") for name in names)
    assert len(set(names)) == len(names)
    # podresources and dra-health v1 share the bare proto package "v1" upstream.
    assert podresources_v1_pb2.DESCRIPTOR.package == dra_health_v1_pb2.DESCRIPTOR.package == "v1"


# --- the generated stubs and servicers use those paths on a real server ---


class _DevicePlugin(deviceplugin_v1beta1_pb2_grpc.DevicePluginServicer):
    def Allocate(
        self,
        request: deviceplugin_v1beta1_pb2.AllocateRequest,
        context: grpc.ServicerContext,
    ) -> deviceplugin_v1beta1_pb2.AllocateResponse:
        ids = ",".join(request.container_requests[0].devices_ids)
        answer = deviceplugin_v1beta1_pb2.ContainerAllocateResponse(envs={"ASCEND_VISIBLE_DEVICES": ids})
        return deviceplugin_v1beta1_pb2.AllocateResponse(container_responses=[answer])


class _Registration(pluginregistration_v1_pb2_grpc.RegistrationServicer):
    def GetInfo(
        self,
        request: pluginregistration_v1_pb2.InfoRequest,
        context: grpc.ServicerContext,
    ) -> pluginregistration_v1_pb2.PluginInfo:
        return pluginregistration_v1_pb2.PluginInfo(type="DRAPlugin", name="npu.huawei.com")


class _DRAv1(dra_v1_pb2_grpc.DRAPluginServicer):
    def NodePrepareResources(
        self,
        request: dra_v1_pb2.NodePrepareResourcesRequest,
        context: grpc.ServicerContext,
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        done = {claim.uid: dra_v1_pb2.NodePrepareResourceResponse() for claim in request.claims}
        return dra_v1_pb2.NodePrepareResourcesResponse(claims=done)


class _DRAv1beta1(dra_v1beta1_pb2_grpc.DRAPluginServicer):
    def NodeUnprepareResources(
        self,
        request: dra_v1beta1_pb2.NodeUnprepareResourcesRequest,
        context: grpc.ServicerContext,
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        done = {claim.uid: dra_v1beta1_pb2.NodeUnprepareResourceResponse() for claim in request.claims}
        return dra_v1beta1_pb2.NodeUnprepareResourcesResponse(claims=done)


class _Health(dra_health_v1alpha1_pb2_grpc.DRAResourceHealthServicer):
    def NodeWatchResources(
        self,
        request: dra_health_v1alpha1_pb2.NodeWatchResourcesRequest,
        context: grpc.ServicerContext,
    ) -> Iterator[dra_health_v1alpha1_pb2.NodeWatchResourcesResponse]:
        health = dra_health_v1alpha1_pb2.DeviceHealth(health=dra_health_v1alpha1_pb2.HEALTHY)
        yield dra_health_v1alpha1_pb2.NodeWatchResourcesResponse(devices=[health])


class _PodResources(podresources_v1_pb2_grpc.PodResourcesListerServicer):
    def List(
        self,
        request: podresources_v1_pb2.ListPodResourcesRequest,
        context: grpc.ServicerContext,
    ) -> podresources_v1_pb2.ListPodResourcesResponse:
        pod = podresources_v1_pb2.PodResources(name="job-0")
        return podresources_v1_pb2.ListPodResourcesResponse(pod_resources=[pod])


@pytest.fixture
def channel() -> Iterator[grpc.Channel]:
    """A server per test, so its worker threads start and stop within the test that uses them."""
    with futures.ThreadPoolExecutor(max_workers=2) as workers:
        server = grpc.server(workers)
        # The servicers implement only what the tests call; the generated runtime base classes
        # answer UNIMPLEMENTED for the rest, while the .pyi marks every method abstract to make real
        # servers complete.
        deviceplugin_v1beta1_pb2_grpc.add_DevicePluginServicer_to_server(_DevicePlugin(), server)  # type: ignore[abstract]
        pluginregistration_v1_pb2_grpc.add_RegistrationServicer_to_server(_Registration(), server)  # type: ignore[abstract]
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAv1(), server)  # type: ignore[abstract]
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(_DRAv1beta1(), server)  # type: ignore[abstract]
        dra_health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(_Health(), server)
        podresources_v1_pb2_grpc.add_PodResourcesListerServicer_to_server(_PodResources(), server)  # type: ignore[abstract]
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        try:
            with grpc.insecure_channel(f"127.0.0.1:{port}") as chan:
                yield chan
        finally:
            server.stop(grace=None).wait()


def _raw_unary(chan: grpc.Channel, path: str, request: bytes) -> bytes:
    """Calls path with pre-encoded bytes, as any client that only knows the method path would."""
    call: grpc.UnaryUnaryMultiCallable[bytes, bytes] = chan.unary_unary(path)
    return call(request, timeout=5)


def test_servers_answer_kubelet_paths(channel: grpc.Channel) -> None:
    allocate = _raw_unary(channel, "/v1beta1.DevicePlugin/Allocate", _ld(1, _ld(1, "Ascend910-0")))
    assert allocate == _ld(1, _map_entry(1, "ASCEND_VISIBLE_DEVICES", "Ascend910-0"))

    info = _raw_unary(channel, "/pluginregistration.Registration/GetInfo", b"")
    assert info == _ld(1, "DRAPlugin") + _ld(2, "npu.huawei.com")

    claim = _ld(1, _ld(1, "team-a") + _ld(2, "uid-1") + _ld(3, "c"))
    prepared = _raw_unary(channel, "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources", claim)
    assert prepared == _map_entry(1, "uid-1", b"")
    unprepared = _raw_unary(channel, "/k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin/NodeUnprepareResources", claim)
    assert unprepared == _map_entry(1, "uid-1", b"")

    pods = _raw_unary(channel, "/v1.PodResourcesLister/List", b"")
    assert pods == _ld(1, _ld(1, "job-0"))

    stream: grpc.UnaryStreamMultiCallable[bytes, bytes] = channel.unary_stream(
        "/v1alpha1.DRAResourceHealth/NodeWatchResources",
    )
    assert list(stream(b"", timeout=5)) == [_ld(1, _varint(2, 1))]


def test_generated_stubs_use_kubelet_paths(channel: grpc.Channel) -> None:
    dp = deviceplugin_v1beta1_pb2_grpc.DevicePluginStub(channel)
    request = deviceplugin_v1beta1_pb2.AllocateRequest(
        container_requests=[deviceplugin_v1beta1_pb2.ContainerAllocateRequest(devices_ids=["a", "b"])],
    )
    assert dict(dp.Allocate(request, timeout=5).container_responses[0].envs) == {"ASCEND_VISIBLE_DEVICES": "a,b"}

    with pytest.raises(grpc.RpcError) as unimplemented:
        dp.GetDevicePluginOptions(deviceplugin_v1beta1_pb2.Empty(), timeout=5)
    assert unimplemented.value.code() == grpc.StatusCode.UNIMPLEMENTED

    health = dra_health_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel)
    (snapshot,) = health.NodeWatchResources(dra_health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=5)
    assert snapshot.devices[0].health == dra_health_v1alpha1_pb2.HEALTHY


def test_dra_v1_device_share_id_is_field_5() -> None:
    """kubernetes/kubernetes#134520 gave Device an optional share_id with a new number, 5."""
    device = dra_v1_pb2.Device.FromString(_ld(3, "npu-0") + _ld(4, "cdi") + _ld(5, "0b7e6c2a"))
    assert (device.device_name, list(device.cdi_device_ids), device.share_id) == ("npu-0", ["cdi"], "0b7e6c2a")
    assert not dra_v1_pb2.Device(device_name="npu-0").HasField("share_id")
