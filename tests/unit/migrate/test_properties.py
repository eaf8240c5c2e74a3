"""`migrate` over generated block-style workloads: right objects, no other line lost, idempotent,
valid."""

from __future__ import annotations

import copy
import difflib
import io
import json
import re
from typing import Any

import kubernetes_validate
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from npu_plugin.migrate import migrate_text

RESOURCE = "huawei.com/Ascend910"
REMOVABLE = re.compile(rf"^\s*({re.escape(RESOURCE)}\s*:.*|(limits|requests)\s*:\s*)$")

sections = st.sampled_from(["limits", "requests", "both"])
counts = st.one_of(st.none(), st.integers(1, 16))
others = st.dictionaries(st.sampled_from(["limits", "requests"]), st.sampled_from([{"cpu": "1"}, {"memory": "1Gi"}]))


@st.composite
def containers(draw: st.DrawFn, prefix: str) -> list[dict[str, Any]]:
    made = []
    for index in range(draw(st.integers(1, 3))):
        resources: dict[str, dict[str, Any]] = json.loads(json.dumps(draw(others)))  # no shared nodes
        count, section = draw(counts), draw(sections)
        for name in (["limits", "requests"] if section == "both" else [section]) if count else []:
            resources.setdefault(name, {})[RESOURCE] = count
        container: dict[str, Any] = {"name": f"{prefix}{index}", "image": "registry.example.com/app:1"}
        if draw(st.booleans()):
            container["env"] = [{"name": "A", "value": "1"}]
        made.append(container | ({"resources": resources} if resources else {}))
    return made


@st.composite
def deployments(draw: st.DrawFn) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(containers("c"))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(containers("init"))
    if draw(st.booleans()):
        spec["volumes"] = [{"name": "v", "emptyDir": {}}]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "d", "namespace": "ns"},
        "spec": {
            "selector": {"matchLabels": {"app": "d"}},
            "template": {"metadata": {"labels": {"app": "d"}}, "spec": spec},
        },
    }


@st.composite
def rendered(draw: st.DrawFn, obj: dict[str, Any]) -> str:
    """`obj` as block YAML in a drawn indentation style, with comments and blank lines sprinkled
    in."""
    dumper = YAML()
    dumper.indent(
        **draw(
            st.sampled_from(
                [
                    dict(mapping=2, sequence=2, offset=0),
                    dict(mapping=2, sequence=4, offset=2),
                    dict(mapping=4, sequence=4, offset=2),
                ]
            )
        )
    )
    out = io.StringIO()
    dumper.dump(obj, out)
    lines = []
    for number, line in enumerate(out.getvalue().splitlines(keepends=True)):
        extra = draw(st.sampled_from(["", "", "", "comment", "blank", "eol"]))
        indent = line[: len(line) - len(line.lstrip(" "))]
        lines += [f"{indent}# note {number}\n"] if extra == "comment" else ["\n"] if extra == "blank" else []
        lines.append(line.rstrip("\n") + f"  # eol {number}\n" if extra == "eol" and not line.endswith(":\n") else line)
    return "".join(lines)


def expected(obj: dict[str, Any]) -> dict[str, Any]:
    """The migration done by hand on plain data: an init container uses the smallest claim holding
    its request, of a container or an earlier init container, else its own."""
    obj = copy.deepcopy(obj)
    spec, counts = obj["spec"]["template"]["spec"], {}
    every = spec.get("initContainers", []) + spec["containers"]
    for container in every:
        resources = container.get("resources", {})
        for section in [s for s in ("limits", "requests") if RESOURCE in resources.get(s, {})]:
            counts[container["name"]] = resources[section].pop(RESOURCE)
            if not resources[section]:
                del resources[section]
    hosts = [(name, count) for name, count in counts.items() if not name.startswith("init")]
    claim_of = {name: name for name, _ in hosts}
    for name, count in counts.items():
        if name.startswith("init"):
            host = min((h for h in hosts if h[1] >= count), key=lambda h: h[1], default=(name, count))
            claim_of[name] = host[0]
            if host[0] == name:
                hosts.append(host)
    for container in every:
        if container["name"] in claim_of:
            container["resources"]["claims"] = [{"name": f"{claim_of[container['name']]}-npu"}]
    if owned := [name for name in counts if claim_of[name] == name]:
        spec["resourceClaims"] = [{"name": f"{n}-npu", "resourceClaimTemplateName": f"d-{n}-npu"} for n in owned]
    return obj


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_workloads(data: st.DataObject) -> None:
    obj = data.draw(deployments())
    text = data.draw(rendered(obj))
    output = migrate_text(text).text
    objects = [o for o in yaml.safe_load_all(output) if o]
    assert objects[-1] == expected(obj)
    for item in objects:
        kubernetes_validate.validate(item, "1.34.0", strict=True)
    source, result = text.splitlines(), output.splitlines()
    opcodes = difflib.SequenceMatcher(None, source, result, autojunk=False).get_opcodes()
    lost = [source[i] for tag, i1, i2, _, _ in opcodes if tag != "equal" for i in range(i1, i2)]
    assert [line for line in lost if not REMOVABLE.match(line.split("  # eol")[0])] == []
    assert migrate_text(output).text == output
