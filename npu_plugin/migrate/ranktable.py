"""Workloads that take part in MindCluster's HCCL rank table (pure): what `migrate` warns about them.

Ascend Operator and hccl-controller build a distributed job's rank table (hccl.json) from the pod
annotations Ascend's device plugin writes after each Allocate, and pass it to the job through a
`rings-config-<job>` ConfigMap; a job takes part by its `ring-controller.atlas` label, that volume,
or by reading the annotations itself (a `fieldRef` env or a downwardAPI volume). npu-plugin writes
the same annotations in both modes, so such a job keeps working once its NPUs come from claims, as
long as the daemon may write them: the warning says what keeps working and what to check.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ruamel.yaml.comments import CommentedMap

from npu_plugin.migrate.findings import Finding, annotation_read, get
from npu_plugin.migrate.workloads import Workload, containers, key_line
from npu_plugin.podannotations.mindcluster import ANNOTATION_KEYS as POD_ANNOTATIONS

RING_LABEL = "ring-controller.atlas"
RINGS_CONFIG_PREFIX = "rings-config-"
WHAT_KEEPS_WORKING = (
    f"npu-plugin writes the pod annotations {', '.join(POD_ANNOTATIONS[:-1])} and {POD_ANNOTATIONS[-1]} in both "
    "modes, as Ascend's device plugin did, so Ascend Operator or hccl-controller keep building the rank table"
)
WHAT_TO_CHECK = (
    "check that npu-plugin runs with --pod-annotations (on by default when it has API credentials), that Ascend "
    "Operator or hccl-controller still runs, and that every NPU has a device IP (deviceIP in npu-plugin "
    "inventory -o json); else the rank table never completes and the job waits"
)


@dataclass(frozen=True, slots=True)
class RankTableInput:
    """One way a pod template takes part in the rank table: where (body line) and what."""

    line: int
    text: str


def rank_table_findings(workload: Workload, who: str) -> list[Finding]:
    """One warning for a migrated pod template (`who` names it) that takes part in the rank table,
    naming every way it does; none when it takes no part."""
    found = sorted(rank_table_inputs(workload), key=lambda item: item.line)
    if not found:
        return []
    uses = "; ".join(dict.fromkeys(item.text for item in found))  # a label on the object and its template: once
    text = f"{who}: takes part in MindCluster's HCCL rank table ({uses}): {WHAT_KEEPS_WORKING}; {WHAT_TO_CHECK}"
    return [Finding(found[0].line, text)]


def rank_table_inputs(workload: Workload) -> list[RankTableInput]:
    """The label, volumes and env of `workload` that tie it to the rank table, in that order."""
    return [
        *_labels(workload),
        *_volumes(workload.pod_spec),
        *(found for container in containers(workload.pod_spec) for found in _env(container.label, container.node)),
    ]


def _labels(workload: Workload) -> Iterator[RankTableInput]:
    """The label on the object or on the pod template (the mapping that holds the pod spec)."""
    seen: set[int] = set()
    for holder in (workload.obj, _parent(workload.obj, workload.pod_spec)):
        labels = get(holder, "metadata", "labels")
        if isinstance(labels, CommentedMap) and RING_LABEL in labels and id(labels) not in seen:
            seen.add(id(labels))
            yield RankTableInput(key_line(labels, RING_LABEL), f"label {RING_LABEL}={labels[RING_LABEL]}")


def _parent(node: Any, child: CommentedMap) -> Any:
    """The mapping that holds `child` as a value, anywhere below `node` (None if none does)."""
    if isinstance(node, dict) and any(value is child for value in node.values()):
        return node
    values = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return next((found for value in values if (found := _parent(value, child)) is not None), None)


def _volumes(pod_spec: CommentedMap) -> Iterator[RankTableInput]:
    volumes = pod_spec.get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        if not isinstance(volume, CommentedMap):
            continue
        name = f'volume "{volume.get("name")}"'
        projected = get(volume, "projected", "sources")
        sources = [volume, *(projected if isinstance(projected, list) else [])]
        for source in sources:
            config_map = get(source, "configMap")
            map_name = get(config_map, "name")
            if isinstance(map_name, str) and map_name.startswith(RINGS_CONFIG_PREFIX):
                yield RankTableInput(key_line(config_map, "name"), f"{name} mounts ConfigMap {map_name}")
            items = get(source, "downwardAPI", "items")
            for item in items if isinstance(items, list) else []:
                field_ref = get(item, "fieldRef")
                annotation = annotation_read(get(field_ref, "fieldPath"))
                if annotation in POD_ANNOTATIONS:
                    line = key_line(field_ref, "fieldPath")
                    yield RankTableInput(line, f"downwardAPI {name} reads the annotation {annotation}")


def _env(label: str, container: CommentedMap) -> Iterator[RankTableInput]:
    env = container.get("env")
    for entry in env if isinstance(env, list) else []:
        field_ref = get(entry, "valueFrom", "fieldRef")
        annotation = annotation_read(get(field_ref, "fieldPath"))
        if annotation in POD_ANNOTATIONS:
            variable = get(entry, "name")
            line = key_line(field_ref, "fieldPath")
            yield RankTableInput(line, f"{label}: env {variable} reads the annotation {annotation}")
