"""What one workload asks for, checked, and the edits that turn its NPU limits into claims
(pure)."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from npu_plugin.errors import MigrateError
from npu_plugin.migrate.workloads import INIT_CONTAINER, Container, Workload, claim_name, containers, template_name

SECTIONS = ("limits", "requests")
REQUEST_NAME = "npu"  # the one device request inside each generated claim
_DIGITS = re.compile(r"[0-9]+")
_SLICE = re.compile(r"huawei\.com/Ascend[0-9A-Za-z]+-.+")
# HAMi's and Volcano's vNPU requests beside `<family>: N`: each of the N vNPUs has at least this
# memory (MB) or this many AI cores. Other slice resources (Ascend's static template resources) name
# no single size.
VNPU_SLICES = {"memory": "MB", "core": "AI cores"}


@dataclass(frozen=True, slots=True)
class VnpuRequest:
    """What each vNPU of a migrated container must have: memory in MiB and AI cores, where it
    asked."""

    memory_mib: int | None = None
    aicore: int | None = None
    slices: tuple[str, ...] = ()  # the slice resources it came from, removed with the NPU entry


@dataclass(frozen=True, slots=True)
class Place:
    """Where in the input a workload sits, so every error names file, line, document and
    container."""

    source: str
    document: int
    first_line: int  # the stream line of the document body's line 0
    workload: str

    def error(self, detail: str, line: int, container: Container | None = None) -> MigrateError:
        who = f", {container.label}" if container else ""
        where = f"{self.source}:{self.first_line + line}: document {self.document} ({self.workload}){who}"
        return MigrateError(f"{where}: {detail}")


@dataclass(frozen=True, slots=True)
class ContainerClaim:
    """One container's NPUs, planned as its own claim from its own template, or as the claim of a
    container that starts after it (an init container's) (count 0: the entry just goes)."""

    container: Container
    resource: str
    line: int  # body line (0-based) of the container's `<resource>:` entry
    count: int
    claim: str
    template: str
    vnpu: VnpuRequest | None = None  # vNPUs of at least this size instead of whole NPUs
    host: Container | None = None  # whose claim this init container shares

    @property
    def removed(self) -> tuple[str, ...]:
        """The resource entries the claim replaces."""
        return (self.resource, *(self.vnpu.slices if self.vnpu else ()))

    @property
    def own_claim(self) -> bool:
        """Whether the claim is this container's: listed in the pod and made from a template of its
        own."""
        return self.count > 0 and self.host is None

    def holds(self, other: ContainerClaim) -> bool:
        """Whether this claim's devices serve what `other` asks for: the same resource, as many or
        more, vNPUs at least as large."""
        if other.resource != self.resource or other.count > self.count or (other.vnpu is None) != (self.vnpu is None):
            return False
        if other.vnpu is None or self.vnpu is None:
            return True
        sizes = ((other.vnpu.memory_mib, self.vnpu.memory_mib), (other.vnpu.aicore, self.vnpu.aicore))
        return all(wanted is None or (have is not None and have >= wanted) for wanted, have in sizes)


def plan(workload: Workload, resources: Sequence[str], place: Place, shared: set[int]) -> list[ContainerClaim]:
    """The claims a workload needs, after every check; empty when no container asks for
    `resources`."""
    planned: list[ContainerClaim] = []
    for container in containers(workload.pod_spec):
        asked = {r: found for r in resources if (found := _requested_count(container, r, place)) is not None}
        if not asked:
            continue
        vnpu = _vnpu_request(container, asked, place)
        for resource, (count, line) in asked.items():
            if container.name is None:
                raise place.error(f"asks for {resource} but has no name", line, container)
            if workload.name is None:
                raise place.error(f"metadata.name is needed to name the ResourceClaimTemplate for {resource}", line)
            claim = claim_name(container.name)
            template = template_name(workload.name, container.name, workload.role)
            planned.append(ContainerClaim(container, resource, line, count, claim, template, vnpu))
            _check_editable(workload, container, place, line, shared)
    planned = _share_init_claims(planned)
    _check_claim_names(workload.pod_spec, planned, place)
    return planned


def _share_init_claims(planned: list[ContainerClaim]) -> list[ContainerClaim]:
    """Each init container that ends before the next container starts uses the smallest claim that
    holds its request, of a container or of an earlier such init container: a claim serves several
    containers of a pod, and the pod then holds max(init, containers) devices as under the device
    plugin, not their sum. Else it keeps its own. A sidecar (restartPolicy Always) runs beside the
    others: it neither lends its claim nor borrows one."""
    hosts = [item for item in planned if item.own_claim and item.container.role != INIT_CONTAINER]
    shared: list[ContainerClaim] = []
    for item in planned:
        host = None
        if item.own_claim and item.container.runs_first:
            host = min((h for h in hosts if h.holds(item)), key=lambda h: h.count, default=None)
            if host is None:
                hosts.append(item)
        shared.append(
            item if host is None else replace(item, claim=host.claim, template=host.template, host=host.container)
        )
    return shared


def _vnpu_request(container: Container, asked: dict[str, tuple[int, int]], place: Place) -> VnpuRequest | None:
    """One claim per container: no second NPU resource. Slice resources beside the NPU resource
    become the size of each vNPU (`<family>-memory`, `<family>-core`); any other slice of an NPU
    cannot be migrated."""
    wanted = [resource for resource, (count, _) in asked.items() if count]
    line = next(iter(asked.values()))[1]
    if len(wanted) > 1:
        detail = f"asks for {' and '.join(wanted)}; migrate one of them at a time with --resource-name"
        raise place.error(detail, line, container)
    resource = next(iter(asked))
    slices = sorted({key for section in _sections(container) for key in section if is_slice_resource(key)})
    sizes = {kind: f"{resource}-{kind}" for kind in VNPU_SLICES if f"{resource}-{kind}" in slices}
    if other := [key for key in slices if key not in sizes.values()]:
        if not wanted:
            return None
        detail = (
            f"asks for {wanted[0]} with the NPU slice resource {', '.join(other)}, which names no vNPU size; "
            f"a DRA claim can ask for a vNPU by {' or '.join(f'{resource}-{k}' for k in VNPU_SLICES)} only: keep "
            "it on the device plugin"
        )
        raise place.error(detail, line, container)
    if not sizes:
        return None
    amounts: dict[str, int] = {}
    for kind, name in sizes.items():
        found = _requested_count(container, name, place, VNPU_SLICES[kind])
        if found is None:
            continue
        if found[0] == 0:
            raise place.error(f"{name} must be 1 or more {VNPU_SLICES[kind]}, got 0", found[1], container)
        amounts[kind] = found[0]
    return VnpuRequest(amounts.get("memory"), amounts.get("core"), tuple(sizes.values()))


def is_slice_resource(key: Any) -> bool:
    """An Ascend resource that stands for part of an NPU (`huawei.com/Ascend310P-memory`,
    `...-core`, `...-2c`)."""
    return isinstance(key, str) and _SLICE.fullmatch(key) is not None


def _sections(container: Container) -> Iterator[CommentedMap]:
    resources = container.node.get("resources")
    if isinstance(resources, CommentedMap):
        yield from (entries for s in SECTIONS if isinstance(entries := resources.get(s), CommentedMap))


def _requested_count(container: Container, resource: str, place: Place, unit: str = "NPUs") -> tuple[int, int] | None:
    """(N, line) when the container asks for `resource` in limits and/or requests, else None."""
    resources = container.node.get("resources")
    if not isinstance(resources, CommentedMap):
        return None
    found = {section: entry for section in SECTIONS if (entry := _entry(resources, section, resource))}
    counts = {section: _count(value, f"{section}[{resource}]", unit) for section, (value, _) in found.items()}
    for section, count in counts.items():
        if isinstance(count, str):
            raise place.error(count, found[section][1], container)
    if len(set(counts.values())) > 1:
        detail = f"{resource} request {counts['requests']} does not match limit {counts['limits']}"
        raise place.error(detail, found["requests"][1], container)
    if not counts:
        return None
    first = next(iter(counts))
    return int(counts[first]), found[first][1]


def _entry(resources: CommentedMap, section: str, resource: str) -> tuple[Any, int] | None:
    entries = resources.get(section)
    if not isinstance(entries, CommentedMap) or resource not in entries:
        return None
    position = entries.lc.key(resource) if resource in entries.lc.data else (entries.lc.line, 0)
    return entries[resource], position[0]


def _count(value: Any, what: str, unit: str) -> int | str:
    """The whole amount, or what is wrong with it."""
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return int(value)
    shown = f'"{value}"' if isinstance(value, str) else "null" if value is None else str(value).lower()
    return f"{what} must be a whole number of {unit} (0 or more), got {shown}"


def _check_editable(workload: Workload, container: Container, place: Place, line: int, shared: set[int]) -> None:
    """Refuse nodes an edit would change in more places than one (YAML aliases, merge keys)."""
    resources = container.node["resources"]
    for node in (workload.pod_spec, container.node, resources, *(resources.get(s) for s in SECTIONS)):
        if not isinstance(node, CommentedMap):
            continue
        if id(node) in shared or node.merge:
            detail = "uses a YAML alias or merge key (<<) where the edit must go; expand it first"
            raise place.error(detail, line, container)


def _check_claim_names(pod_spec: CommentedMap, planned: Sequence[ContainerClaim], place: Place) -> None:
    """A new claim's name must be free in the pod and, shared or not, in its container."""
    planned = [item for item in planned if item.count]
    if not planned:
        return
    taken = set(_names(pod_spec.get("resourceClaims"), "spec.resourceClaims", pod_spec, place))
    for item in planned:
        resources = item.container.node["resources"]
        in_use = set(_names(resources.get("claims"), "resources.claims", resources, place, item.container))
        if item.claim in in_use or (item.own_claim and item.claim in taken):
            raise place.error(f'the pod already has a resource claim named "{item.claim}"', item.line, item.container)
        if item.own_claim:
            taken.add(item.claim)


def _names(
    entries: Any,
    what: str,
    parent: CommentedMap,
    place: Place,
    container: Container | None = None,
) -> Iterator[str]:
    if entries is None:
        return
    if not isinstance(entries, list):
        raise place.error(f"{what} must be a list", parent.lc.line, container)
    yield from (entry["name"] for entry in entries if isinstance(entry, dict) and isinstance(entry.get("name"), str))


def apply(workload: Workload, planned: Sequence[ContainerClaim]) -> None:
    """Move each planned container from its resource's limits to its claim, and list the claims in
    the pod."""
    for item in planned:
        resources = item.container.node["resources"]
        for section in SECTIONS:
            entries = resources.get(section)
            if not isinstance(entries, CommentedMap):
                continue
            for resource in item.removed:
                entries.pop(resource, None)
            if not entries:
                del resources[section]
        if item.count:
            claims = _list(resources, "claims", len(resources))
            claims.append(_mapping([("name", item.claim)], claims))
        elif not resources:
            del item.container.node["resources"]
    claimed = [item for item in planned if item.own_claim]
    if claimed:
        pod_claims = _list(workload.pod_spec, "resourceClaims", _after_containers(workload.pod_spec))
    for item in claimed:
        pod_claims.append(_mapping([("name", item.claim), ("resourceClaimTemplateName", item.template)], pod_claims))


def _list(parent: CommentedMap, key: str, position: int) -> CommentedSeq:
    if key not in parent:
        entries = CommentedSeq()
        if parent.fa.flow_style():
            entries.fa.set_flow_style()
        parent.insert(position, key, entries)
    existing: CommentedSeq = parent[key]
    return existing


def _mapping(pairs: list[tuple[str, str]], parent: CommentedSeq) -> CommentedMap:
    """A new mapping for `parent`: in flow style inside a flow sequence, so it renders as `{name:
    ...}`."""
    mapping = CommentedMap(pairs)
    if parent.fa.flow_style():
        mapping.fa.set_flow_style()
    return mapping


def _after_containers(pod_spec: CommentedMap) -> int:
    keys = list(pod_spec)
    return max((keys.index(key) + 1 for key in ("initContainers", "containers") if key in keys), default=len(keys))


def vnpu_selectors(driver: str, family: str, vnpu: VnpuRequest) -> list[str]:
    """CEL selectors for vNPUs of the family (`huawei.com/Ascend910` takes the whole 910 family)
    that are at least as large as asked. Devices are published smallest first, so the scheduler's
    first fit gives the smallest template that holds the request, as HAMi does."""
    device_type = family.split("/", 1)[1]
    match = "startsWith" if device_type == "Ascend910" else "equals"
    attribute = f'device.attributes["{driver}"].deviceType'
    selectors = [
        f'{attribute}.startsWith("{device_type}")' if match == "startsWith" else f'{attribute} == "{device_type}"'
    ]
    if vnpu.memory_mib is not None:
        selectors.append(f'device.capacity["{driver}"].memCapacity.compareTo(quantity("{_mib(vnpu.memory_mib)}")) >= 0')
    if vnpu.aicore is not None:
        selectors.append(f'device.capacity["{driver}"].aiCore.compareTo(quantity("{vnpu.aicore}")) >= 0')
    return selectors


def share_capacity(vnpu: VnpuRequest) -> dict[str, str]:
    """The capacity requests of a share that holds what a HAMi-style request asked (memory in MiB,
    AI cores)."""
    requests = {}
    if vnpu.memory_mib is not None:
        requests["memory"] = _mib(vnpu.memory_mib)
    if vnpu.aicore is not None:
        requests["aiCore"] = str(vnpu.aicore)
    return requests


def _mib(amount: int) -> str:
    return f"{amount // 1024}Gi" if amount % 1024 == 0 else f"{amount}Mi"


def claim_template(
    name: str,
    namespace: str | None,
    count: int,
    device_class: str,
    topology_attribute: str | None,
    *,
    selectors: Sequence[str] = (),
    capacity: Mapping[str, str] | None = None,
) -> CommentedMap:
    """A resource.k8s.io/v1 ResourceClaimTemplate asking for `count` devices of `device_class` that
    match every CEL selector, each with these `capacity` requests."""
    metadata = CommentedMap([("name", name)] + ([("namespace", namespace)] if namespace else []))
    exactly = CommentedMap([("deviceClassName", device_class), ("allocationMode", "ExactCount"), ("count", count)])
    if selectors:
        exactly["selectors"] = CommentedSeq(
            [CommentedMap([("cel", CommentedMap([("expression", expression)]))]) for expression in selectors]
        )
    if capacity:
        exactly["capacity"] = CommentedMap([("requests", CommentedMap(capacity))])
    devices = CommentedMap([("requests", CommentedSeq([CommentedMap([("name", REQUEST_NAME), ("exactly", exactly)])]))])
    if topology_attribute and count > 1:
        names = CommentedSeq([REQUEST_NAME])
        names.fa.set_flow_style()
        constraint = CommentedMap([("requests", names), ("matchAttribute", topology_attribute)])
        devices["constraints"] = CommentedSeq([constraint])
    return CommentedMap(
        [
            ("apiVersion", "resource.k8s.io/v1"),
            ("kind", "ResourceClaimTemplate"),
            ("metadata", metadata),
            ("spec", CommentedMap([("spec", CommentedMap([("devices", devices)]))])),
        ]
    )
