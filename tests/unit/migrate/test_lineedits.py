"""`migrate` edits the user's own lines: exact outputs for the layouts real files mix
(table-driven)."""

from __future__ import annotations

import pytest
import yaml

from npu_plugin.migrate import migrate_text
from npu_plugin.migrate.lineedits import flow_end


def workload_text(text: str) -> str:
    """The migrated workload's document: the last one of the output."""
    return migrate_text(text).text.split("---\n")[-1]


HEAD = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
CASES = [
    (
        "mixed indentation keeps every untouched line",
        HEAD + "  nodeSelector: { accelerator: huawei-Ascend910 }\n"
        "  containers:\n"
        "    - name: c\n"
        '      args: [ "--port", "8080" ]\n'
        "      ports:\n"
        "      - containerPort: 8080\n"
        "      resources:\n"
        "          limits:\n"
        "              huawei.com/Ascend910: 2   # two dies\n"
        "              memory: 64Gi\n"
        "  volumes:\n"
        "  - name: data\n",
        HEAD + "  nodeSelector: { accelerator: huawei-Ascend910 }\n"
        "  containers:\n"
        "    - name: c\n"
        '      args: [ "--port", "8080" ]\n'
        "      ports:\n"
        "      - containerPort: 8080\n"
        "      resources:\n"
        "          limits:\n"
        "              memory: 64Gi\n"
        "          claims:\n"
        "            - name: c-npu\n"
        "  resourceClaims:\n"
        "    - name: c-npu\n"
        "      resourceClaimTemplateName: p-c-npu\n"
        "  volumes:\n"
        "  - name: data\n",
    ),
    (
        "comments in and after the removed block stay",
        HEAD + "  containers:\n"
        "  - name: c\n"
        "    resources:\n"
        "      limits:\n"
        "        # NPUs for training\n"
        "        huawei.com/Ascend910: 8   # eight\n"
        "    env: []\n"
        "  # volumes follow\n"
        "  volumes: []\n",
        HEAD + "  containers:\n"
        "  - name: c\n"
        "    resources:\n"
        "        # NPUs for training\n"
        "      claims:\n"
        "      - name: c-npu\n"
        "    env: []\n"
        "  resourceClaims:\n"
        "  - name: c-npu\n"
        "    resourceClaimTemplateName: p-c-npu\n"
        "  # volumes follow\n"
        "  volumes: []\n",
    ),
    (
        "flow collections are re-rendered whole, block ones line by line",
        HEAD + "  initContainers: [{name: i, image: x, resources: {limits: {huawei.com/Ascend910: 1}}}]\n"
        "  containers:\n"
        "  - {name: c, image: \"y\",  resources: {limits: {huawei.com/Ascend910: 2,  cpu: '1'}}}\n"
        "  - name: d\n"
        "    resources:\n"
        "      requests: {huawei.com/Ascend910: 1, memory: 1Gi}\n"
        "      limits:\n"
        "        huawei.com/Ascend910: 1\n"
        "      claims: []\n"
        "  resourceClaims:\n"
        "  - name: other\n"
        "    resourceClaimName: shared\n",
        HEAD + "  initContainers: [{name: i, image: x, resources: {claims: [{name: d-npu}]}}]\n"
        "  containers:\n"
        "  - {name: c, image: \"y\", resources: {limits: {cpu: '1'}, claims: [{name: c-npu}]}}\n"
        "  - name: d\n"
        "    resources:\n"
        "      requests: {memory: 1Gi}\n"
        "      claims:\n"
        "      - name: d-npu\n"
        "  resourceClaims:\n"
        "  - name: other\n"
        "    resourceClaimName: shared\n"
        "  - name: c-npu\n"
        "    resourceClaimTemplateName: p-c-npu\n"
        "  - name: d-npu\n"
        "    resourceClaimTemplateName: p-d-npu\n",
    ),
    (
        "count 0 alone removes resources",
        HEAD
        + "  containers:\n  - name: c\n    resources:\n      limits:\n        huawei.com/Ascend910: 0\n    image: i\n",
        HEAD + "  containers:\n  - name: c\n    image: i\n",
    ),
    (
        "wide dashes are copied",
        HEAD + "    containers:\n    -   name: c\n        resources:\n            limits: {huawei.com/Ascend310P: 1}\n",
        HEAD + "    containers:\n"
        "    -   name: c\n"
        "        resources:\n"
        "            claims:\n"
        "            -   name: c-npu\n"
        "    resourceClaims:\n"
        "    -   name: c-npu\n"
        "        resourceClaimTemplateName: p-c-npu\n",
    ),
]


JOBSET_HEAD = (
    "apiVersion: jobset.x-k8s.io/v1alpha2\nkind: JobSet\nmetadata: {name: js}\nspec:\n  replicatedJobs:\n"
    "  - name: workers\n    template:\n      spec:\n        template:\n          spec:\n"
)
CASES += [
    (
        "a flow mapping's trailing comment stays once, where it was",
        HEAD + "  containers:\n  - name: c\n    resources:\n      limits: {huawei.com/Ascend910: 4, cpu: 16}  # note\n",
        HEAD + "  containers:\n"
        "  - name: c\n"
        "    resources:\n"
        "      limits: {cpu: 16}  # note\n"
        "      claims:\n"
        "      - name: c-npu\n"
        "  resourceClaims:\n"
        "  - name: c-npu\n"
        "    resourceClaimTemplateName: p-c-npu\n",
    ),
    (
        "a comment-like last line of a block scalar is the scalar's",
        HEAD + "  containers:\n"
        "  - name:  c\n"
        "    resources:\n"
        "      limits:\n"
        "        huawei.com/Ascend910: 1\n"
        "    args:\n"
        "    - |\n"
        "      train.py\n"
        "      # done\n",
        HEAD + "  containers:\n"
        "  - name:  c\n"
        "    resources:\n"
        "      claims:\n"
        "      - name: c-npu\n"
        "    args:\n"
        "    - |\n"
        "      train.py\n"
        "      # done\n"
        "  resourceClaims:\n"
        "  - name: c-npu\n"
        "    resourceClaimTemplateName: p-c-npu\n",
    ),
    (
        "a block scalar that ends the file without a newline keeps its indicator",
        JOBSET_HEAD + "            containers:\n"
        "            - name: w\n"
        "              resources:\n"
        "                limits:\n"
        "                  huawei.com/Ascend910: 8\n"
        "              command:\n"
        "              - bash\n"
        "              - -c\n"
        "              - |\n"
        "                torchrun  train.py",
        JOBSET_HEAD + "            resourceClaims:\n"
        "            - name: w-npu\n"
        "              resourceClaimTemplateName: js-workers-w-npu\n"
        "            containers:\n"
        "            - name: w\n"
        "              resources:\n"
        "                claims:\n"
        "                - name: w-npu\n"
        "              command:\n"
        "              - bash\n"
        "              - -c\n"
        "              - |\n"
        "                torchrun  train.py",
    ),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_line_edits(text: str, expected: str) -> None:
    assert workload_text(text) == expected
    assert migrate_text(migrate_text(text).text).changes == ()


def test_crlf_without_final_newline() -> None:
    text = (
        HEAD + "  containers:\n  - name: c\n    resources:\n      limits:\n        huawei.com/Ascend910: 1"
    ).replace("\n", "\r\n")
    output = migrate_text(text).text
    assert output.endswith("\r\n  - name: c-npu\r\n    resourceClaimTemplateName: p-c-npu")
    assert "\n" not in output.replace("\r\n", "")
    assert migrate_text(output).text == output


def test_mixed_line_endings_keep_each_line_s_own() -> None:
    text = (
        HEAD.replace("\n", "\r\n")
        + "  containers:\n  - name: c\n    resources:\n      limits: {huawei.com/Ascend910: 1}\r\n"
    )
    output = migrate_text(text).text.split("---\r\n")[-1]
    assert output == HEAD.replace("\n", "\r\n") + (
        "  containers:\n  - name: c\n    resources:\n      claims:\r\n      - name: c-npu\r\n"
        "  resourceClaims:\r\n  - name: c-npu\r\n    resourceClaimTemplateName: p-c-npu\r\n"
    )


FLOW_ENDS = [
    ("one line", ["a: {b: 1}\n"], (0, 3), (0, 9)),
    ("nested", ["a: [{b: [1, 2]}, c] # x\n"], (0, 3), (0, 19)),
    ("quotes hide brackets", ["a: ['}', \"]\\\"\", 'it''s']\n"], (0, 3), (0, 24)),
    ("comment hides brackets", ["a: {b: 1, # }\n", "  c: 2}\n"], (0, 3), (1, 7)),
    ("unterminated", ["a: {b: 1\n"], (0, 3), None),
]


@pytest.mark.parametrize(("text", "start", "end"), [c[1:] for c in FLOW_ENDS], ids=[c[0] for c in FLOW_ENDS])
def test_flow_end(text: list[str], start: tuple[int, int], end: tuple[int, int] | None) -> None:
    assert flow_end(text, *start) == end


def test_a_shape_line_edits_cannot_make_falls_back_to_a_whole_dump() -> None:
    text = (
        HEAD
        + "  containers:\n  - name: c\n    resources:\n      limits:\n        ? huawei.com/Ascend910\n        : 1\n"
    )
    result = migrate_text(text)
    pod = yaml.safe_load(result.text.split("---\n")[-1])
    assert pod["spec"]["containers"][0]["resources"] == {"claims": [{"name": "c-npu"}]}
    assert pod["spec"]["resourceClaims"] == [{"name": "c-npu", "resourceClaimTemplateName": "p-c-npu"}]
