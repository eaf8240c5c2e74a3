"""`migrate` warns about workloads that take part in MindCluster's HCCL rank table, and says what
keeps working (the pod annotations npu-plugin writes) and what to check."""

from __future__ import annotations

import textwrap

import pytest

from npu_plugin.migrate import Options, migrate_text
from npu_plugin.migrate.ranktable import WHAT_KEEPS_WORKING, WHAT_TO_CHECK, rank_table_inputs
from npu_plugin.migrate.workloads import objects, workloads
from npu_plugin.migrate.yamlstream import load

LIMITS = "resources: {limits: {huawei.com/Ascend910: 8}}"


def volcano_job(labels: str = "", template_labels: str = "", pod: str = "", container: str = "") -> str:
    """A Volcano Job with one task; `pod` and `container` are extra lines of the pod spec and of its
    one container."""
    text = f"""\
        apiVersion: batch.volcano.sh/v1alpha1
        kind: Job
        metadata:
          name: train
          namespace: ml
          labels: {{{labels}}}
        spec:
          tasks:
          - name: worker
            template:
              metadata:
                labels: {{{template_labels}}}
              spec:
                containers:
                - name: c
                  image: i
                  {LIMITS}
        """
    return textwrap.dedent(text) + textwrap.indent(container, " " * 10) + textwrap.indent(pod, " " * 8)


def env(name: str, annotation: str) -> str:
    return f"env:\n- name: {name}\n  valueFrom:\n    fieldRef:\n      fieldPath: metadata.annotations['{annotation}']\n"


CONFIG = "ascend.kubectl.kubernetes.io/ascend-910-configuration"
RINGS_VOLUME = "volumes:\n- name: ascend-910-config\n  configMap:\n    name: rings-config-train\n"
DOWNWARD = f"""\
volumes:
- name: annotations
  downwardAPI:
    items:
    - path: configuration
      fieldRef:
        fieldPath: metadata.annotations["{CONFIG}"]
    - path: labels
      fieldRef: {{fieldPath: metadata.labels}}
"""
PROJECTED = """\
volumes:
- name: all
  projected:
    sources:
    - configMap: {name: rings-config-train}
    - downwardAPI:
        items:
        - {path: real, fieldRef: {fieldPath: "metadata.annotations['huawei.com/AscendReal']"}}
"""

# (case, manifest, what the workload's rank-table inputs are, in order, with their 1-based lines)
CASES = [
    ("nothing", volcano_job(), []),
    (
        "the label on the job",
        volcano_job(labels="ring-controller.atlas: ascend-910"),
        [(6, "label ring-controller.atlas=ascend-910")],
    ),
    (
        "the label on the pod template",
        volcano_job(template_labels="ring-controller.atlas: ascend-910b"),
        [(12, "label ring-controller.atlas=ascend-910b")],
    ),
    ("another label", volcano_job(labels="app: train", template_labels="tier: a"), []),
    (
        "a rings-config ConfigMap volume",
        volcano_job(pod=RINGS_VOLUME),
        [(21, 'volume "ascend-910-config" mounts ConfigMap rings-config-train')],
    ),
    ("another ConfigMap", volcano_job(pod=RINGS_VOLUME.replace("rings-config-train", "train-settings")), []),
    (
        "env from the device configuration",
        volcano_job(container=env("RANK_TABLE", CONFIG)),
        [(22, f'container "c": env RANK_TABLE reads the annotation {CONFIG}')],
    ),
    (
        "env from the real devices",
        volcano_job(container=env("REAL", "huawei.com/AscendReal")),
        [(22, 'container "c": env REAL reads the annotation huawei.com/AscendReal')],
    ),
    (
        "env from the kubelet's ids",
        volcano_job(container=env("KLT", "huawei.com/kltDev")),
        [(22, 'container "c": env KLT reads the annotation huawei.com/kltDev')],
    ),
    (
        "env from Volcano's device choice",
        volcano_job(container=env("ASCEND_VISIBLE_DEVICES", "huawei.com/Ascend910")),
        [],
    ),
    ("env from another annotation", volcano_job(container=env("X", "example.com/rank")), []),
    (
        "a downwardAPI volume",
        volcano_job(pod=DOWNWARD),
        [(24, f'downwardAPI volume "annotations" reads the annotation {CONFIG}')],
    ),
    (
        "a projected volume",
        volcano_job(pod=PROJECTED),
        [
            (22, 'volume "all" mounts ConfigMap rings-config-train'),
            (25, 'downwardAPI volume "all" reads the annotation huawei.com/AscendReal'),
        ],
    ),
    (
        "malformed volumes and env are skipped",
        volcano_job(pod="volumes: [7, {configMap: 3}]\n", container="env: [1]\n"),
        [],
    ),
]


@pytest.mark.parametrize(("manifest", "expected"), [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_rank_table_inputs(manifest: str, expected: list[tuple[int, str]]) -> None:
    (workload,) = [found for obj in objects(load(manifest, "t", 1)) for found in workloads(obj)]
    assert [(found.line + 1, found.text) for found in rank_table_inputs(workload)] == expected


def test_a_migrated_workload_gets_one_warning_naming_every_input_once() -> None:
    manifest = volcano_job(
        labels="ring-controller.atlas: ascend-910",
        template_labels="ring-controller.atlas: ascend-910",
        pod=RINGS_VOLUME,
        container=env("REAL", "huawei.com/AscendReal"),
    )
    result = migrate_text(manifest, source="job.yaml")
    ours = [warning for warning in result.warnings if "rank table" in warning]
    assert ours == [
        'job.yaml:6: document 1: batch.volcano.sh/v1alpha1/Job ml/train, task "worker": takes part in MindCluster\'s '
        'HCCL rank table (label ring-controller.atlas=ascend-910; container "c": env REAL reads the annotation '
        'huawei.com/AscendReal; volume "ascend-910-config" mounts ConfigMap rings-config-train): '
        f"{WHAT_KEEPS_WORKING}; {WHAT_TO_CHECK}"
    ]
    assert result.unresolved == ()  # npu-plugin writes AscendReal under DRA too: nothing to drop


def test_the_warning_says_what_keeps_working_and_what_to_check() -> None:
    for annotation in ("huawei.com/AscendReal", "huawei.com/kltDev", CONFIG):
        assert annotation in WHAT_KEEPS_WORKING
    assert "--pod-annotations" in WHAT_TO_CHECK and "device IP" in WHAT_TO_CHECK


@pytest.mark.parametrize(
    ("manifest", "options"),
    [
        (volcano_job(labels="ring-controller.atlas: ascend-910").replace("huawei.com/Ascend910: 8", "cpu: 1"), None),
        (volcano_job(labels="ring-controller.atlas: ascend-910"), Options(resource_names=("huawei.com/Ascend310P",))),
    ],
    ids=["asks for no NPU", "asks for a resource not selected"],
)
def test_a_workload_migrate_leaves_alone_gets_no_warning(manifest: str, options: Options | None) -> None:
    result = migrate_text(manifest, options)
    assert (result.changes, [warning for warning in result.warnings if "rank table" in warning]) == ((), [])


def test_the_migrated_output_is_quiet() -> None:
    migrated = migrate_text(volcano_job(labels="ring-controller.atlas: ascend-910", pod=RINGS_VOLUME)).text
    again = migrate_text(migrated)
    assert (again.text, again.changes, again.warnings, again.unresolved) == (migrated, (), (), ())
