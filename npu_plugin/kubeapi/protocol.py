"""The Kubernetes calls the product makes (`KubeApi`) and the wire shapes it writes and reads.

`kube.KubeClient` implements the protocol against a real API server; tests use an in-memory fake.
Objects read from the server are checked against these shapes in `kubeapi/client.py` before anyone
sees them, so the fields declared required here are present with the declared types.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, Literal, NotRequired, Protocol, TypedDict, TypeVar

WatchEventType = Literal["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]


class OwnerReference(TypedDict):
    apiVersion: str
    kind: str
    name: str
    uid: str
    controller: bool


class ManagedFieldsEntry(TypedDict, total=False):
    """Who wrote an object: the API server records each writer's field manager (for a create or
    update without `fieldManager`, its User-Agent up to the first `/`)."""

    manager: str
    operation: str


class ObjectMeta(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    uid: str
    resourceVersion: str
    labels: dict[str, str]
    annotations: dict[str, str]
    creationTimestamp: str
    ownerReferences: list[OwnerReference]
    managedFields: list[ManagedFieldsEntry]


class DeviceAttribute(TypedDict, total=False):
    """Exactly one of these is set."""

    string: str
    int: int
    bool: bool
    version: str


class CapacityRange(TypedDict):
    min: str
    max: NotRequired[str]
    step: NotRequired[str]


class CapacityRequestPolicy(TypedDict):
    default: NotRequired[str]
    validValues: NotRequired[list[str]]
    validRange: NotRequired[CapacityRange]


class DeviceCapacity(TypedDict):
    value: str
    requestPolicy: NotRequired[CapacityRequestPolicy]


class DeviceTaint(TypedDict):
    key: str
    effect: str
    value: NotRequired[str]
    timeAdded: NotRequired[str]


class Counter(TypedDict):
    value: str


class CounterSet(TypedDict):
    """A slice's shared counters (partitionable devices): `npu-3-counters {aicore: 20, ...}`."""

    name: str
    counters: dict[str, Counter]


class CounterConsumption(TypedDict):
    """What a device takes from a counter set when it is allocated."""

    counterSet: str
    counters: dict[str, Counter]


class SliceDevice(TypedDict):
    name: str
    attributes: dict[str, DeviceAttribute]
    capacity: dict[str, DeviceCapacity]
    taints: NotRequired[list[DeviceTaint]]
    consumesCounters: NotRequired[list[CounterConsumption]]
    allowMultipleAllocations: NotRequired[bool]


class ResourcePool(TypedDict):
    name: str
    generation: int
    resourceSliceCount: int


class ResourceSliceSpec(TypedDict):
    driver: str
    nodeName: str
    pool: ResourcePool
    devices: NotRequired[list[SliceDevice]]  # absent from a counter-only slice
    sharedCounters: NotRequired[list[CounterSet]]


class ResourceSlice(TypedDict):
    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: ResourceSliceSpec


class StoredObject(TypedDict):
    """Any object as the server returns it: it has a name and a resourceVersion."""

    metadata: ObjectMeta


class StoredSlice(TypedDict):
    """A ResourceSlice as the server returns it: it has a name and a resourceVersion."""

    metadata: ObjectMeta
    spec: ResourceSliceSpec


class DeviceClassSpec(TypedDict, total=False):
    """Only what the daemon reads: the extended resource a class maps (KEP-5004)."""

    extendedResourceName: str


class StoredDeviceClass(TypedDict):
    metadata: ObjectMeta
    spec: DeviceClassSpec


T = TypeVar("T", bound=StoredObject)


# Not slots: calling a subscripted alias (`SliceEvent(...)`) sets `__orig_class__`, which a frozen
# slots dataclass refuses with a TypeError (a frozen plain one with an AttributeError typing expects).
@dataclass(frozen=True)
class ObjectList(Generic[T]):
    items: tuple[T, ...]
    resource_version: str


@dataclass(frozen=True)
class WatchEvent(Generic[T]):
    """One watch event; a BOOKMARK carries only a resourceVersion (`object` is None)."""

    type: WatchEventType
    resource_version: str
    object: T | None


SliceList = ObjectList[StoredSlice]
SliceEvent = WatchEvent[StoredSlice]


class Node(TypedDict):
    metadata: ObjectMeta


class AllocationResult(TypedDict, total=False):
    request: str
    driver: str
    pool: str
    device: str


class ClaimDevices(TypedDict, total=False):
    results: list[AllocationResult]


class ClaimAllocation(TypedDict, total=False):
    devices: ClaimDevices


class ClaimStatus(TypedDict, total=False):
    allocation: ClaimAllocation


class ResourceClaim(TypedDict):
    """Only `metadata` is checked on reading; the allocation is checked by `dra.claims`, result by
    result."""

    metadata: ObjectMeta
    status: NotRequired[ClaimStatus]


class Pod(TypedDict):
    """Only `metadata` (name, namespace, uid, resourceVersion) is checked on reading; `spec` and
    `status` are read field by field by those who need them."""

    metadata: ObjectMeta
    spec: NotRequired[dict[str, Any]]
    status: NotRequired[dict[str, Any]]


class KubeApi(Protocol):
    """Blocking calls; every failure (unreachable, error status, a body that is not the expected
    object) raises KubeApiError. Callers run them off the event loop."""

    def get_node(self, name: str) -> Node: ...

    def list_slices(self, node: str, driver: str) -> SliceList: ...

    def watch_slices(self, node: str, driver: str, resource_version: str, timeout_seconds: int) -> Iterator[SliceEvent]:
        """Events after `resource_version` with bookmarks, until the server ends the watch; an ERROR
        event raises KubeApiError with its code (410 when the resourceVersion is too old)."""
        ...

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        """Create; a dry run (`dryRun=All`) answers what would be stored and stores nothing."""
        ...

    def server_version(self) -> tuple[int, int]:
        """The API server's Kubernetes (major, minor), from GET /version."""
        ...

    def replace_slice(self, name: str, body: ResourceSlice) -> StoredSlice: ...

    def delete_slice(self, name: str) -> None:
        """Deleting a slice that is already gone is not an error."""
        ...

    def get_claim(self, namespace: str, name: str) -> ResourceClaim: ...

    def apply_claim_status(self, namespace: str, name: str, body: Mapping[str, Any], *, field_manager: str) -> None:
        """Server-side apply of `body` (an apply configuration) to the claim's status subresource,
        as `field_manager`, forcing conflicts."""
        ...

    def list_device_classes(self) -> ObjectList[StoredDeviceClass]: ...

    def watch_device_classes(
        self, resource_version: str, timeout_seconds: int
    ) -> Iterator[WatchEvent[StoredDeviceClass]]:
        """As `watch_slices`, for every DeviceClass of the cluster."""
        ...

    def list_pods(self, node: str) -> list[Pod]:
        """The pods bound to `node` (every namespace)."""
        ...

    def get_pod(self, namespace: str, name: str) -> Pod: ...

    def annotate_pod(
        self, namespace: str, name: str, annotations: Mapping[str, str], *, uid: str, resource_version: str = ""
    ) -> None:
        """A merge patch of these annotations, applied only while the pod is still the one with
        `uid` (and, when given, at `resource_version`): otherwise a 409 Conflict."""
        ...

    def close(self) -> None: ...
