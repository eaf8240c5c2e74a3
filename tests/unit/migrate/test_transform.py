"""`migrate`'s pure core, table-driven: what changes, what is refused and with which message."""

from __future__ import annotations

import re
import textwrap

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from npu_plugin.errors import MigrateError
from npu_plugin.migrate import Options, migrate_text
from npu_plugin.migrate.workloads import claim_name, template_name
from npu_plugin.migrate.yamlstream import Style, detect_style, load, split_documents


def pod(resources: str, name: str = "p", extra: str = "", kind: str = "Pod") -> str:
    """A one-container Pod whose `resources:` block is `resources` (indented under the
    container)."""
    body = textwrap.indent(textwrap.dedent(resources).strip("\n"), " " * 6)
    return (
        f"apiVersion: v1\nkind: {kind}\nmetadata:\n  name: {name}\nspec:\n  containers:\n"
        f"  - name: c\n    image: i\n    resources:\n{body}\n{extra}"
    )


def objects(text: str) -> list[dict[str, object]]:
    return [d for d in yaml.safe_load_all(text) if d]


def container_resources(text: str) -> object:
    return next(o for o in objects(text) if o["kind"] == "Pod")["spec"]["containers"][0]["resources"]  # type: ignore[index]


# --- what gets migrated
# -----------------------------------------------------------------------------------

COUNTS = [
    ("limits int", "limits:\n  huawei.com/Ascend910: 2", 2),
    ("limits string", 'limits:\n  huawei.com/Ascend910: "2"', 2),
    ("requests only", "requests:\n  huawei.com/Ascend910: 3", 3),
    ("both, equal", "limits:\n  huawei.com/Ascend910: 1\nrequests:\n  huawei.com/Ascend910: '1'", 1),
    ("flow limits", "limits: {huawei.com/Ascend910: 4, cpu: 1}", 4),
]


@pytest.mark.parametrize(("resources", "count"), [c[1:] for c in COUNTS], ids=[c[0] for c in COUNTS])
def test_count_comes_from_limits_or_requests(resources: str, count: int) -> None:
    result = migrate_text(pod(resources))
    template = objects(result.text)[0]
    assert template["kind"] == "ResourceClaimTemplate"
    exactly = {"deviceClassName": "ascend910.npu.huawei.com", "allocationMode": "ExactCount", "count": count}
    assert template["spec"]["spec"]["devices"]["requests"] == [{"name": "npu", "exactly": exactly}]  # type: ignore[index]
    assert [c.count for c in result.changes] == [count]


RESOURCES_AFTER = [
    ("only the npu", "limits:\n  huawei.com/Ascend910: 1", {"claims": [{"name": "c-npu"}]}),
    (
        "other limits stay",
        "limits:\n  huawei.com/Ascend910: 1\n  cpu: 2",
        {"limits": {"cpu": 2}, "claims": [{"name": "c-npu"}]},
    ),
    (
        "requests emptied, limits kept",
        "limits:\n  memory: 1Gi\nrequests:\n  huawei.com/Ascend910: 1",
        {"limits": {"memory": "1Gi"}, "claims": [{"name": "c-npu"}]},
    ),
    (
        "existing claims kept first",
        "claims:\n- name: nic\nlimits:\n  huawei.com/Ascend910: 1",
        {"claims": [{"name": "nic"}, {"name": "c-npu"}]},
    ),
    ("flow resources", "{limits: {huawei.com/Ascend910: 1}}", {"claims": [{"name": "c-npu"}]}),
]


@pytest.mark.parametrize(("resources", "after"), [c[1:] for c in RESOURCES_AFTER], ids=[c[0] for c in RESOURCES_AFTER])
def test_container_resources_after_migration(resources: str, after: object) -> None:
    assert container_resources(migrate_text(pod(resources)).text) == after


def test_options_choose_resource_class_and_constraint_domain() -> None:
    options = Options(
        resource_names=("huawei.com/Ascend310P",),
        device_class="ascend310p.npu.huawei.com",
        same_topology_group=True,
        driver_name="npu.example.com",
    )
    text = pod("limits:\n  huawei.com/Ascend310P: 2\n  huawei.com/Ascend910: 1")
    result = migrate_text(text, options)
    devices = objects(result.text)[0]["spec"]["spec"]["devices"]  # type: ignore[index]
    assert devices["requests"][0]["exactly"]["deviceClassName"] == "ascend310p.npu.huawei.com"
    assert devices["constraints"] == [{"requests": ["npu"], "matchAttribute": "npu.example.com/topologyGroup"}]
    assert container_resources(result.text) == {"limits": {"huawei.com/Ascend910": 1}, "claims": [{"name": "c-npu"}]}


def test_namespace_is_copied_and_generate_name_names_the_template() -> None:
    text = pod("limits:\n  huawei.com/Ascend910: 1").replace("  name: p\n", "  generateName: run-\n  namespace: ml\n")
    template = objects(migrate_text(text).text)[0]
    assert template["metadata"] == {"name": "run-c-npu", "namespace": "ml"}


def test_change_describes_where_and_what() -> None:
    (change,) = migrate_text(pod("limits:\n  huawei.com/Ascend910: 2"), source="w.yaml").changes
    assert str(change) == (
        'w.yaml:11: Pod p, container "c": huawei.com/Ascend910: 2 -> claim "c-npu" from ResourceClaimTemplate p-c-npu'
    )


# --- bytes that must survive
# ------------------------------------------------------------------------------


def test_crlf_line_endings_are_kept() -> None:
    text = pod("limits:\n  huawei.com/Ascend910: 1").replace("\n", "\r\n")
    output = migrate_text(text).text
    assert "\n" not in output.replace("\r\n", "")
    assert migrate_text(output).text == output


def test_missing_final_newline_stays_missing() -> None:
    output = migrate_text(pod("limits:\n  huawei.com/Ascend910: 1").rstrip("\n")).text
    assert not output.endswith("\n")
    assert output.endswith("resourceClaimTemplateName: p-c-npu")


def test_content_on_the_marker_line() -> None:
    text = (
        "--- {apiVersion: v1, kind: Pod, metadata: {name: p}, spec: {containers: "
        "[{name: c, image: i, resources: {limits: {huawei.com/Ascend910: 2}}}]}}\n"
    )
    output = migrate_text(text).text
    assert [o["kind"] for o in objects(output)] == ["ResourceClaimTemplate", "Pod"]
    assert migrate_text(output).text == output


def test_stream_without_workloads_is_returned_as_is() -> None:
    text = "# only a comment\n---\n---\n...\n%YAML 1.2\n---\na:   'b'   # c\n"
    assert migrate_text(text).text == text


def test_unknown_kinds_that_ask_for_the_resource_are_left_behind() -> None:
    text = textwrap.dedent("""\
        apiVersion: example.com/v1
        kind: Trainer
        metadata: {name: t, namespace: ml}
        spec:
          workers:
          - pod:
              containers:
              - name: c
                resources: {limits: {huawei.com/Ascend910: 8}}
        """)
    result = migrate_text(text, source="t.yaml")
    assert result.text == text
    assert result.left_behind == (
        "t.yaml:9: document 1: example.com/v1/Trainer ml/t: spec.workers[0].pod.containers[0].resources.limits "
        "still asks for huawei.com/Ascend910: migrate does not know where this kind keeps its pod templates; "
        "left unchanged",
    )
    assert (result.warnings, result.changes, result.skipped) == ((), (), 1)


# --- refused input
# ----------------------------------------------------------------------------------------

TWO_JOBS = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: train}
spec:
  selector: {matchLabels: {a: b}}
  template:
    metadata: {labels: {a: b}}
    spec:
      containers:
      - name: main
        resources: {limits: {huawei.com/Ascend910: 1}}
---
apiVersion: batch/v1
kind: Job
metadata: {name: train}
spec:
  template:
    spec:
      containers:
      - name: main
        resources: {limits: {huawei.com/Ascend910: 1}}
"""
EXISTING_TEMPLATE = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: p-c-npu}
spec: {spec: {devices: {requests: []}}}
---
"""
ALIASED = """\
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
  - name: a
    resources: &npu
      limits: {huawei.com/Ascend910: 1}
  - name: b
    resources: *npu
"""
ERRORS = [
    (
        "invalid YAML",
        "a: 1\nb: [1\nc: 2\n",
        "f.yaml:3:2: document 1: invalid YAML: while parsing a flow sequence, expected ',' or ']', but got ':'",
    ),
    (
        "invalid YAML in a later document",
        "a: 1\n---\nkind: Pod\n  x: 1\n",
        "f.yaml:4:4: document 2: invalid YAML: mapping values are not allowed here",
    ),
    (
        "duplicate key",
        "a: 1\na: 2\n",
        'f.yaml:2:1: document 1: invalid YAML: while constructing a mapping, found duplicate key "a" with value "2" '
        '(original value: "1")',
    ),
    (
        "word",
        pod("limits:\n  huawei.com/Ascend910: two"),
        'f.yaml:11: document 1 (Pod p), container "c": limits[huawei.com/Ascend910] must be a whole number '
        'of NPUs (0 or more), got "two"',
    ),
    (
        "fraction",
        pod("limits:\n  huawei.com/Ascend910: 1.5"),
        'f.yaml:11: document 1 (Pod p), container "c": limits[huawei.com/Ascend910] must be a whole number '
        "of NPUs (0 or more), got 1.5",
    ),
    (
        "negative",
        pod("limits:\n  huawei.com/Ascend910: -2"),
        'f.yaml:11: document 1 (Pod p), container "c": limits[huawei.com/Ascend910] must be a whole number '
        "of NPUs (0 or more), got -2",
    ),
    (
        "null",
        pod("limits:\n  huawei.com/Ascend910:"),
        'f.yaml:11: document 1 (Pod p), container "c": limits[huawei.com/Ascend910] must be a whole number '
        "of NPUs (0 or more), got null",
    ),
    (
        "boolean",
        pod("limits:\n  huawei.com/Ascend910: true"),
        'f.yaml:11: document 1 (Pod p), container "c": limits[huawei.com/Ascend910] must be a whole number '
        "of NPUs (0 or more), got true",
    ),
    (
        "mismatch",
        pod("limits:\n  huawei.com/Ascend910: 2\nrequests:\n  huawei.com/Ascend910: 1"),
        'f.yaml:13: document 1 (Pod p), container "c": huawei.com/Ascend910 request 1 does not match limit 2',
    ),
    (
        "pod already has the claim",
        pod(
            "limits:\n  huawei.com/Ascend910: 1", extra="  resourceClaims:\n  - name: c-npu\n    resourceClaimName: x\n"
        ),
        'f.yaml:11: document 1 (Pod p), container "c": the pod already has a resource claim named "c-npu"',
    ),
    (
        "container already uses the claim",
        pod("claims:\n- name: c-npu\nlimits:\n  huawei.com/Ascend910: 1"),
        'f.yaml:13: document 1 (Pod p), container "c": the pod already has a resource claim named "c-npu"',
    ),
    (
        "template name taken in the stream",
        EXISTING_TEMPLATE + pod("limits:\n  huawei.com/Ascend910: 1"),
        'f.yaml:16: document 2 (Pod p), container "c": ResourceClaimTemplate p-c-npu already exists at f.yaml:1',
    ),
    (
        "two workloads, one template name",
        TWO_JOBS,
        'f.yaml:21: document 2 (Job train), container "main": ResourceClaimTemplate train-main-npu would also '
        'be generated for document 1 (Deployment train), container "main"',
    ),
    (
        "no name",
        pod("limits:\n  huawei.com/Ascend910: 1").replace("  name: p\n", "  labels: {a: b}\n"),
        "f.yaml:11: document 1 (Pod <unnamed>): metadata.name is needed to name the ResourceClaimTemplate for "
        "huawei.com/Ascend910",
    ),
    (
        "container without a name",
        pod("limits:\n  huawei.com/Ascend910: 1").replace("- name: c\n    image", "- image"),
        "f.yaml:10: document 1 (Pod p), container #1: asks for huawei.com/Ascend910 but has no name",
    ),
    (
        "shared by alias",
        ALIASED,
        'f.yaml:8: document 1 (Pod p), container "a": uses a YAML alias or merge key (<<) where the edit must go; '
        "expand it first",
    ),
    (
        "resourceClaims not a list",
        pod("limits:\n  huawei.com/Ascend910: 1", extra="  resourceClaims: {}\n"),
        "f.yaml:6: document 1 (Pod p): spec.resourceClaims must be a list",
    ),
]


@pytest.mark.parametrize(("text", "message"), [c[1:] for c in ERRORS], ids=[c[0] for c in ERRORS])
def test_bad_input_is_refused_with_a_precise_message(text: str, message: str) -> None:
    with pytest.raises(MigrateError) as caught:
        migrate_text(text, source="f.yaml")
    assert str(caught.value) == message


# --- names
# ------------------------------------------------------------------------------------------------

NAMES = [
    ("plain", ("train", "main"), "main-npu", "train-main-npu"),
    ("dotted workload", ("web.v2", "main"), "main-npu", "web.v2-main-npu"),
    ("long", ("w" * 250, "c" * 63), "c" * 54 + "-c789836f", "w" * 244 + "-a17e6fc2"),
    ("repaired", ("Train_Job", "Main"), "main-npu-8d71ec07", "train-job-main-npu-f78b3289"),
]


@pytest.mark.parametrize(("parts", "claim", "template"), [c[1:] for c in NAMES], ids=[c[0] for c in NAMES])
def test_names(parts: tuple[str, str], claim: str, template: str) -> None:
    assert (claim_name(parts[1]), template_name(*parts)) == (claim, template)


LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@given(st.text(min_size=1, max_size=300), st.text(min_size=1, max_size=80))
def test_derived_names_are_always_valid(workload: str, container: str) -> None:
    assert LABEL.fullmatch(claim_name(container))
    name = template_name(workload, container)
    assert SUBDOMAIN.fullmatch(name) and len(name) <= 253


# --- the stream splitter and style detection ---------------------------------------------------

SPLITS = [
    ("bare", "a: 1\n", [("", "a: 1\n", "", 1)]),
    ("markers", "---\na: 1\n...\n--- # c\nb: 2\n", [("---\n", "a: 1\n", "...\n", 2), ("--- # c\n", "b: 2\n", "", 5)]),
    ("content on marker", "--- [1]\n", [("", "--- [1]\n", "", 1)]),
    ("directive", "# x\n%YAML 1.2\n---\na: 1\n", [("# x\n%YAML 1.2\n---\n", "a: 1\n", "", 4)]),
    ("empty documents", "---\n---\n", [("---\n", "", "", 2), ("---\n", "", "", 3)]),
    ("marker-like text", "a: |\n  ---\n----\n", [("", "a: |\n  ---\n----\n", "", 1)]),
]


@pytest.mark.parametrize(("text", "parts"), [c[1:] for c in SPLITS], ids=[c[0] for c in SPLITS])
def test_split_documents(text: str, parts: list[tuple[str, str, str, int]]) -> None:
    assert [(d.head, d.body, d.tail, d.line) for d in split_documents(text)] == parts


@given(
    st.lists(st.sampled_from(["---\n", "--- # c\n", "...\n", "a: 1\n", "# x\n", "%YAML 1.2\n", "\n", "--- x", "b\r\n"]))
)
def test_split_documents_loses_no_byte(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert "".join(d.text for d in split_documents(text)) == text


STYLES = [
    ("kubectl", "a:\n  b:\n  - c: 1\n    d: 2\n", Style(2, 2, 0)),
    ("indented sequences", "a:\n  b:\n    - c: 1\n      d: 2\n", Style(2, 4, 2)),
    ("four spaces", "a:\n    b:\n    -   c: 1\n        d: 2\n", Style(4, 4, 0)),
    ("flow only", "{a: [1]}\n", Style()),
]


@pytest.mark.parametrize(("text", "style"), [c[1:] for c in STYLES], ids=[c[0] for c in STYLES])
def test_detect_style(text: str, style: Style) -> None:
    assert detect_style(load(text, "s", 1)) == style
