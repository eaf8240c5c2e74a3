"""API objects (plain dicts as listed) to the records of `snapshot.py` (pure).

Each `*_of` function returns None for an object `plan` has no interest in (a pod asking for no NPU)
and raises ShapeError, naming the object and the field, for one whose shape it cannot read: the
reader skips that object and reports the line.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping
from typing import Any

from npu_plugin.plan.snapshot import (
    RESOURCE_PREFIX,
    ClaimInfo,
    ClaimTemplateInfo,
    DeviceClassInfo,
    DisruptionBudget,
    NodeInfo,
    NpuPod,
    Owner,
    PluginDaemonSet,
    PluginPod,
    QuotaInfo,
    Requirement,
    SliceInfo,
)

MODE_LABEL = "npu.huawei.com/plugin-mode"
PART_OF = ("app.kubernetes.io/part-of", "npu-plugin")
_VERSION = re.compile(r"^v?(\d+)\.(\d+)")
_FINISHED = ("Succeeded", "Failed")


class ShapeError(ValueError):
    """An object whose shape `plan` cannot read; the message names it and the field."""


def version_of(text: object) -> tuple[int, int] | None:
    """`v1.34.2` → (1, 34); None for anything else."""
    match = _VERSION.match(text) if isinstance(text, str) else None
    return (int(match.group(1)), int(match.group(2))) if match else None


# ---- typed access with the object's name in every error


class _Reader:
    def __init__(self, kind: str, obj: object) -> None:
        if not isinstance(obj, dict):
            raise ShapeError(f"a {kind} that is not an object")
        self.kind, self.obj = kind, obj
        metadata = obj.get("metadata")
        if not isinstance(metadata, dict) or not isinstance(metadata.get("name"), str):
            raise ShapeError(f"a {kind} without metadata.name")
        self.metadata = metadata
        self.name: str = metadata["name"]
        namespace = metadata.get("namespace", "")
        self.namespace: str = namespace if isinstance(namespace, str) else ""

    @property
    def where(self) -> str:
        return f"{self.kind} {self.namespace + '/' if self.namespace else ''}{self.name}"

    def fail(self, path: str, wanted: str) -> ShapeError:
        return ShapeError(f"{self.where}: {path} is not {wanted}")

    def get(self, path: str, wanted: type, default: Any, value: Any = None) -> Any:
        """The value at dotted `path` (under `value`, default the object), `default` when absent."""
        current: Any = self.obj if value is None else value
        for part in _parts(path):
            if current is None:
                return default
            if not isinstance(current, dict):
                raise self.fail(path, "an object")
            current = current.get(part)
        if current is None:
            return default
        if not isinstance(current, wanted) or (wanted is int and isinstance(current, bool)):
            raise self.fail(path, {dict: "an object", list: "a list", str: "a string", int: "an integer"}[wanted])
        return current

    def mapping(self, path: str, value: Any = None) -> dict[str, Any]:
        result: dict[str, Any] = self.get(path, dict, {}, value)
        return result

    def items(self, path: str, value: Any = None) -> Iterator[dict[str, Any]]:
        for index, item in enumerate(self.get(path, list, [], value)):
            if not isinstance(item, dict):
                raise self.fail(f"{path}[{index}]", "an object")
            yield item

    @functools.cached_property
    def labels(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.mapping("metadata.labels").items()}


@functools.cache
def _parts(path: str) -> tuple[str, ...]:
    return tuple(path.split("."))


def _count(reader: _Reader, path: str, value: object) -> int:
    """An extended-resource quantity: a whole number (as a string or a number)."""
    text = str(value)
    if isinstance(value, bool) or not text.isdigit():
        raise reader.fail(path, f"a whole number (got {text!r})")
    return int(text)


def _npu_counts(reader: _Reader, path: str, values: Mapping[str, Any]) -> dict[str, int]:
    return {k: _count(reader, f"{path}[{k}]", v) for k, v in values.items() if k.startswith(RESOURCE_PREFIX)}


# ---- nodes


def node_of(obj: object) -> NodeInfo:
    reader = _Reader("Node", obj)
    labels = reader.labels
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in reader.items("status.conditions"))
    capacity = _npu_counts(reader, "status.capacity", reader.mapping("status.capacity"))
    return NodeInfo(
        name=reader.name,
        mode=labels.get(MODE_LABEL),
        kubelet=version_of(reader.get("status.nodeInfo.kubeletVersion", str, "")),
        ready=ready,
        unschedulable=reader.get("spec.unschedulable", bool, False),
        capacity=tuple(sorted((k, v) for k, v in capacity.items() if v > 0)),
    )


# ---- the plugin's own DaemonSets and pods


def _serve_flags(reader: _Reader, spec_path: str) -> dict[str, str] | None:
    """The flags of the container running `serve` (the image's CMD is serve, so a container of a
    part-of=npu-plugin object with only flags counts)."""
    for container in reader.items(f"{spec_path}.containers"):
        args = [str(a) for a in reader.get("args", list, [], container)]
        args = [str(a) for a in reader.get("command", list, [], container)][1:] + args
        if args and not args[0].startswith("-") and args[0] != "serve":
            continue
        flags: dict[str, str] = {}
        for index, arg in enumerate(args):
            name, equals, value = arg.partition("=")
            if name.startswith("--"):
                following = args[index + 1] if index + 1 < len(args) else ""
                flags[name[2:]] = value if equals else ("" if following.startswith("-") else following)
        return flags
    return None


def daemonset_of(obj: object) -> PluginDaemonSet | None:
    reader = _Reader("DaemonSet", obj)
    if reader.labels.get(PART_OF[0]) != PART_OF[1]:
        return None
    flags = _serve_flags(reader, "spec.template.spec")
    if flags is None:
        return None
    selector = reader.mapping("spec.template.spec.nodeSelector")
    return PluginDaemonSet(
        namespace=reader.namespace,
        name=reader.name,
        mode=flags.get("mode", "device-plugin"),
        selected_mode=str(selector[MODE_LABEL]) if MODE_LABEL in selector else None,
        vnpu=flags.get("vnpu", "off"),
        unhealthy_policy=flags.get("unhealthy-policy", "remove"),
    )


def _ready(reader: _Reader) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in reader.items("status.conditions"))


def pod_of(obj: object) -> PluginPod | NpuPod | None:
    """One of the plugin's own pods (labelled part-of npu-plugin, running `serve`), a pod using
    NPUs, or None."""
    reader = _Reader("Pod", obj)
    if reader.labels.get(PART_OF[0]) == PART_OF[1] and (flags := _serve_flags(reader, "spec")) is not None:
        return PluginPod(
            namespace=reader.namespace,
            name=reader.name,
            node=reader.get("spec.nodeName", str, ""),
            mode=flags.get("mode", "device-plugin"),
            ready=_ready(reader),
        )
    return _npu_pod(reader)


# ---- workloads


def _owner(reader: _Reader) -> Owner | None:
    for ref in reader.items("metadata.ownerReferences"):
        if ref.get("controller") is True:
            kind, name = str(ref.get("kind", "")), str(ref.get("name", ""))
            api_version = str(ref.get("apiVersion", ""))
            group = api_version.rpartition("/")[0]
            hash_ = reader.labels.get("pod-template-hash")
            if kind == "ReplicaSet" and hash_ and name.endswith(f"-{hash_}"):
                # A Deployment names its ReplicaSets <deployment>-<pod-template-hash>.
                return Owner("Deployment", name[: -len(hash_) - 1], "apps")
            return Owner(kind, name, group)
    return None


def _npu_pod(reader: _Reader) -> NpuPod | None:
    """A pod that is not finished and asks for huawei.com/* resources or for resource claims."""
    if reader.get("status.phase", str, "") in _FINISHED:
        return None
    totals: dict[str, int] = {}
    for part in ("containers", "initContainers"):
        for index, container in enumerate(reader.items(f"spec.{part}")):
            where = f"spec.{part}[{index}].resources"
            limits = _npu_counts(reader, f"{where}.limits", reader.mapping("resources.limits", container))
            requests = _npu_counts(reader, f"{where}.requests", reader.mapping("resources.requests", container))
            for name in limits.keys() | requests.keys():
                totals[name] = totals.get(name, 0) + max(limits.get(name, 0), requests.get(name, 0))
    claims = [
        str(status.get("resourceClaimName"))
        for status in reader.items("status.resourceClaimStatuses")
        if status.get("resourceClaimName")
    ]
    # The claim the scheduler made for extended resources a DeviceClass maps (KEP-5004).
    if extended := reader.get("status.extendedResourceClaimStatus.resourceClaimName", str, ""):
        claims.append(extended)
    wants_claims = bool(reader.get("spec.resourceClaims", list, []))
    resources = tuple(sorted((k, v) for k, v in totals.items() if v > 0))
    if not resources and not wants_claims:
        return None
    node = reader.get("spec.nodeName", str, "")
    scheduled = any(c.get("type") == "PodScheduled" for c in reader.items("status.conditions"))
    return NpuPod(
        namespace=reader.namespace,
        name=reader.name,
        node=node,
        resources=resources,
        owner=_owner(reader),
        scheduler=reader.get("spec.schedulerName", str, "default-scheduler"),
        labels=tuple(sorted(reader.labels.items())),
        claims=tuple(claims),
        placed_by_name=bool(node) and not scheduled,
    )


# ---- DRA objects


def slice_of(obj: object, driver: str) -> SliceInfo:
    reader = _Reader("ResourceSlice", obj)
    spec = reader.mapping("spec")
    devices = list(reader.items("devices", spec))
    slice_driver = reader.get("driver", str, "", spec)
    vnpus = taints = 0
    counters = bool(reader.get("sharedCounters", list, [], spec))
    foreign = False
    for device in devices:
        attributes = reader.get("attributes", dict, {}, device)
        ours = reader.get(driver, dict, None, attributes) if driver in attributes else None
        vnpus += (
            bool("vnpuTemplate" in attributes or (isinstance(ours, dict) and "vnpuTemplate" in ours))
            and slice_driver == driver
        )
        taints += bool(reader.get("taints", list, [], device))
        counters = counters or bool(reader.get("consumesCounters", list, [], device))
        foreign = foreign or (slice_driver != driver and any(k.startswith(f"{driver}/") for k in attributes))
    return SliceInfo(
        name=reader.name,
        node=reader.get("nodeName", str, "", spec),
        driver=slice_driver,
        pool=reader.get("pool.name", str, "", spec),
        generation=reader.get("pool.generation", int, 0, spec),
        slice_count=reader.get("pool.resourceSliceCount", int, 1, spec),
        devices=len(devices),
        vnpus=vnpus,
        taints=taints,
        counters=counters,
        foreign_attributes=foreign,
    )


def device_class_of(obj: object, driver: str) -> DeviceClassInfo:
    reader = _Reader("DeviceClass", obj)
    expressions = [reader.get("cel.expression", str, "", selector) for selector in reader.items("spec.selectors")]
    text = " ".join(expressions)
    return DeviceClassInfo(
        name=reader.name,
        extended_resource=reader.get("spec.extendedResourceName", str, None),
        ours=f'"{driver}"' in text,
    )


def _request_classes(reader: _Reader, spec: dict[str, Any]) -> tuple[str, ...]:
    names: set[str] = set()
    for request in reader.items("devices.requests", spec):
        exactly = reader.mapping("exactly", request)
        if name := reader.get("deviceClassName", str, "", exactly):
            names.add(name)
        for sub in reader.items("firstAvailable", request):
            if name := reader.get("deviceClassName", str, "", sub):
                names.add(name)
    return tuple(sorted(names))


def claim_of(obj: object, driver: str) -> ClaimInfo:
    reader = _Reader("ResourceClaim", obj)
    results = reader.items("status.allocation.devices.results")
    pools = {str(r.get("pool", "")) for r in results if r.get("driver") == driver}
    return ClaimInfo(
        namespace=reader.namespace,
        name=reader.name,
        classes=_request_classes(reader, reader.mapping("spec")),
        nodes=tuple(sorted(pools)),
        reserved_for=tuple(
            str(r.get("name", "")) for r in reader.items("status.reservedFor") if r.get("resource") == "pods"
        ),
    )


def claim_template_of(obj: object) -> ClaimTemplateInfo:
    reader = _Reader("ResourceClaimTemplate", obj)
    return ClaimTemplateInfo(reader.namespace, reader.name, _request_classes(reader, reader.mapping("spec.spec")))


# ---- policy objects


def budget_of(obj: object) -> DisruptionBudget:
    reader = _Reader("PodDisruptionBudget", obj)
    selector = reader.get("spec.selector", dict, None)
    requirements: tuple[Requirement, ...] | None = None
    if selector is not None:
        found = [Requirement(str(k), "In", (str(v),)) for k, v in reader.mapping("matchLabels", selector).items()]
        for index, expression in enumerate(reader.items("matchExpressions", selector)):
            values = reader.get("values", list, [], expression)
            operator = reader.get("operator", str, "", expression)
            if operator not in ("In", "NotIn", "Exists", "DoesNotExist"):
                raise reader.fail(
                    f"spec.selector.matchExpressions[{index}].operator", "In, NotIn, Exists or DoesNotExist"
                )
            found.append(Requirement(reader.get("key", str, "", expression), operator, tuple(map(str, values))))
        requirements = tuple(found)
    return DisruptionBudget(
        namespace=reader.namespace,
        name=reader.name,
        selector=requirements,
        disruptions_allowed=reader.get("status.disruptionsAllowed", int, 0),
    )


def quota_of(obj: object) -> QuotaInfo | None:
    reader = _Reader("ResourceQuota", obj)
    hard = {str(k): str(v) for k, v in reader.mapping("spec.hard").items() if RESOURCE_PREFIX in str(k)}
    if not hard:
        return None
    return QuotaInfo(reader.namespace, reader.name, tuple(sorted(hard.items())))
