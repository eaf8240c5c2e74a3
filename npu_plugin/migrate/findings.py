"""What `migrate` reports beside its edits (pure): requests it leaves behind, quotas, runtime
breakage.

Each finding is one line naming the object (`apiVersion/kind namespace/name`) or the workload and
container, with the body line it starts from; the caller adds file and document.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from npu_plugin.migrate.claims import SECTIONS, ContainerClaim, is_slice_resource
from npu_plugin.migrate.workloads import (
    UNMIGRATABLE,
    Workload,
    containers,
    group_kind,
    identity,
    kept_as_is,
    key_line,
    qualified,
    type_label,
)

ASCEND_RESOURCE = re.compile(r"huawei\.com/Ascend\S*")
_ANNOTATION_FIELD = re.compile(r"""metadata\.annotations\[\s*['"](?P<name>[^'"]+)['"]\s*\]""")
# The annotation Volcano's Ascend plugin names after the resource (`huawei.com/Ascend910`), not the
# ones the device plugin writes (`huawei.com/AscendReal`, which npu-plugin writes in both modes).
_RESOURCE_ANNOTATION = re.compile(r"huawei\.com/Ascend\d\S*")
_QUOTA_PREFIXES = ("requests.", "limits.", "")
_LIMIT_RANGE_FIELDS = ("max", "min", "default", "defaultRequest", "maxLimitRequestRatio")
DEFAULT_SCHEDULER = "default-scheduler"
VOLCANO_GROUP = "batch.volcano.sh"
_VOLCANO_QUEUE = ("scheduling.volcano.sh", "Queue")
_QUEUE_FIELDS = (("capability",), ("deserved",), ("guarantee", "resource"))


@dataclass(frozen=True, slots=True)
class Finding:
    line: int  # body line (0-based) the finding is about
    text: str


def object_label(obj: CommentedMap) -> str:
    namespace, name = identity(obj)
    return f"{type_label(obj)} {qualified(namespace, name or '<unnamed>')}"


def left_behind(obj: CommentedMap, resources: Sequence[str]) -> list[Finding]:
    """Requests for `resources` still in `obj` (after migration): in a kind migrate cannot
    rewrite, or in an object it leaves as it is."""
    reason = kept_as_is(obj) or UNMIGRATABLE.get(
        group_kind(obj), "migrate does not know where this kind keeps its pod templates"
    )
    return [
        Finding(line, f"{object_label(obj)}: {path} still asks for {resource}: {reason}; left unchanged")
        for path, resource, line in _requests(obj, "", resources)
    ]


def _requests(node: Any, path: str, resources: Sequence[str]) -> Iterator[tuple[str, str, int]]:
    """(path, resource, line) of every `limits`/`requests` mapping entry naming one of
    `resources`."""
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            child = f"{path}.{key}" if path else str(key)
            if key in SECTIONS and isinstance(value, CommentedMap):
                for resource in resources:
                    if resource in value:
                        yield child, resource, key_line(value, resource)
            yield from _requests(value, child, resources)
    elif isinstance(node, CommentedSeq):
        for index, item in enumerate(node):
            yield from _requests(item, f"{path}[{index}]", resources)


def ascend_names(node: Any) -> Iterator[str]:
    """Every Ascend resource name a `limits`/`requests` mapping in `node` asks for."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in SECTIONS and isinstance(value, dict):
                yield from (name for name in value if isinstance(name, str) and ASCEND_RESOURCE.fullmatch(name))
            yield from ascend_names(value)
    elif isinstance(node, list):
        for item in node:
            yield from ascend_names(item)


def quota_findings(obj: CommentedMap, resources: Sequence[str], device_class: dict[str, str]) -> list[Finding]:
    """ResourceQuota and LimitRange entries for `resources`, each with what DRA counts instead
    (`device_class`: each resource's DeviceClass, where it has one)."""
    group, kind = group_kind(obj)
    spec = obj.get("spec")
    if group or not isinstance(spec, CommentedMap):
        return []
    if kind == "ResourceQuota":
        return list(_quota(obj, spec, resources, device_class))
    if kind == "LimitRange":
        return list(_limit_range(obj, spec, resources, device_class))
    return []


def _quota(
    obj: CommentedMap, spec: CommentedMap, resources: Sequence[str], device_class: dict[str, str]
) -> Iterator[Finding]:
    hard = spec.get("hard")
    if not isinstance(hard, CommentedMap):
        return
    for resource in resources:
        for prefix in _QUOTA_PREFIXES:
            key = prefix + resource
            if key in hard:
                devices = f"{device_class.get(resource, '<class>')}.deviceclass.resource.k8s.io/devices"
                yield Finding(
                    key_line(hard, key),
                    f"{object_label(obj)}: spec.hard[{key}] counts only device-plugin pods; DRA claims count "
                    f'against spec.hard[{devices}]: "{hard[key]}"',
                )


def _limit_range(
    obj: CommentedMap, spec: CommentedMap, resources: Sequence[str], device_class: dict[str, str]
) -> Iterator[Finding]:
    limits = spec.get("limits")
    for index, item in enumerate(limits if isinstance(limits, list) else []):
        for field in _LIMIT_RANGE_FIELDS:
            entries = item.get(field) if isinstance(item, CommentedMap) else None
            for resource in resources:
                if isinstance(entries, CommentedMap) and resource in entries:
                    devices = f"{device_class.get(resource, '<class>')}.deviceclass.resource.k8s.io/devices"
                    yield Finding(
                        key_line(entries, resource),
                        f"{object_label(obj)}: spec.limits[{index}].{field}[{resource}] applies only to "
                        f"device-plugin containers; DRA has no per-container limit: cap claims with a "
                        f"ResourceQuota on {devices}",
                    )


def queue_findings(obj: CommentedMap, resources: Sequence[str]) -> list[Finding]:
    """A Volcano Queue's quota entries for `resources`: Volcano counts no DRA claims against a
    Queue."""
    if group_kind(obj) != _VOLCANO_QUEUE:
        return []
    found: list[Finding] = []
    for path in _QUEUE_FIELDS:
        entries = get(obj, "spec", *path)
        for resource in resources:
            if isinstance(entries, CommentedMap) and resource in entries:
                found.append(
                    Finding(
                        key_line(entries, resource),
                        f"{object_label(obj)}: spec.{'.'.join(path)}[{resource}] counts only device-plugin pods; "
                        "Volcano counts no DRA claims against a Queue, so pods whose NPUs come from claims are not "
                        f'held to it: "{entries[resource]}"',
                    )
                )
    return found


def mentions(node: Any, resources: Sequence[str]) -> bool:
    """Whether a key names one of `resources`, as limits do and quotas do
    (`requests.<resource>`)."""
    if isinstance(node, dict):
        return any(_names(key, resources) or mentions(value, resources) for key, value in node.items())
    if isinstance(node, list):
        return any(mentions(item, resources) for item in node)
    return False


def _names(key: Any, resources: Sequence[str]) -> bool:
    return isinstance(key, str) and any(key == r or key.endswith("." + r) for r in resources)


def init_claim_findings(planned: Sequence[ContainerClaim], who: str) -> list[Finding]:
    """Init containers (of one pod template, `who`) that keep a claim of their own beside the claims
    of the containers they precede: the pod holds both at once, where the device plugin reused the
    init container's devices."""
    found: list[Finding] = []
    for item in planned:
        if not (item.own_claim and item.container.runs_first):
            continue
        beside = sum(
            other.count
            for other in planned
            if other.own_claim and not other.container.runs_first and other.resource == item.resource
        )
        if beside:
            count = item.count
            found.append(
                Finding(
                    item.line,
                    f"{who}, {item.container.label}: its {count} {item.resource} fit in no claim of a container that "
                    f"starts after it, so it gets a claim of its own and the pod holds {count} + {beside} at once, "
                    f"where the device plugin needed max({count}, {beside}): lower its request to share a claim",
                )
            )
    return found


def scheduler_findings(workload: Workload, who: str) -> list[Finding]:
    """The scheduler that must place `workload`'s pods once their NPUs come from claims; `who` names
    the template.

    A scheduler set for the whole object (a Volcano Job's, an AscendJob's) is named with the object
    alone, so its several templates repeat one line that callers can fold.
    """
    return [
        Finding(
            line,
            f"{who if own else workload.label}: schedulerName {scheduler} must support DRA resource claims "
            "(Volcano needs its DRA support enabled), or the pods stay Pending",
        )
        for scheduler, line, own in _schedulers(workload)
    ]


def annotation_findings(workload: Workload, who: str) -> list[Finding]:
    """Env read from the device plugin's pod annotation in a pod whose NPUs come from claims:
    nothing sets it."""
    claims = workload.pod_spec.get("resourceClaims")
    if not (isinstance(claims, list) and claims) or next(ascend_names(workload.pod_spec), None) is not None:
        return []
    found: list[Finding] = []
    for container in containers(workload.pod_spec):
        for variable, annotation, line in _annotation_env(container.node):
            found.append(
                Finding(
                    line,
                    f"{who}, {container.label}: env {variable} reads the pod annotation {annotation}, which "
                    "nothing sets under DRA; drop it: the claim's CDI spec injects ASCEND_VISIBLE_DEVICES",
                )
            )
    return found


def _schedulers(workload: Workload) -> Iterator[tuple[str, int, bool]]:
    """A non-default scheduler, and whether the template set it: else the job's, else Volcano's
    own."""
    spec = workload.obj.get("spec")
    for node in (workload.pod_spec, spec):
        scheduler = node.get("schedulerName") if isinstance(node, CommentedMap) else None
        if isinstance(node, CommentedMap) and isinstance(scheduler, str) and scheduler:
            if scheduler != DEFAULT_SCHEDULER:
                yield scheduler, key_line(node, "schedulerName"), node is workload.pod_spec
            return
    if group_kind(workload.obj)[0] == VOLCANO_GROUP:  # Volcano's admission defaults its Jobs to itself
        yield "volcano", int(workload.obj.lc.line), False


def _annotation_env(container: CommentedMap) -> Iterator[tuple[str, str, int]]:
    env = container.get("env")
    for entry in env if isinstance(env, list) else []:
        field_ref = get(entry, "valueFrom", "fieldRef")
        name = annotation_read(get(field_ref, "fieldPath"))
        if name and _RESOURCE_ANNOTATION.fullmatch(name) and not is_slice_resource(name):
            yield str(entry.get("name")), name, key_line(field_ref, "fieldPath")


def annotation_read(field_path: Any) -> str | None:
    """The annotation a downward-API `fieldPath` reads (`metadata.annotations['key']`), if any."""
    match = _ANNOTATION_FIELD.fullmatch(field_path.strip()) if isinstance(field_path, str) else None
    return match["name"] if match else None


def get(node: Any, *keys: str) -> Any:
    """`node[k1][k2]...`, None where a step is missing or not a mapping."""
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node
