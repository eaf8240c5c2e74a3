"""`migrate` finds pod templates wherever each known kind keeps them, and is loud about what it
cannot rewrite."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest
import yaml

from npu_plugin.errors import MigrateError
from npu_plugin.migrate import Options, migrate_text
from npu_plugin.migrate.workloads import KINDS as WORKLOAD_KINDS
from npu_plugin.sim.scheduler import PublishedDevice, cel_matcher

POD = "{containers: [{name: main, image: i, resources: {limits: {huawei.com/Ascend910: 8}}}]}"
TEMPLATE = f"{{spec: {POD}}}"


def manifest(api_version: str, kind: str, spec: str) -> str:
    head = f"apiVersion: {api_version}\nkind: {kind}\nmetadata: {{name: w, namespace: ml}}\nspec:\n"
    return head + textwrap.indent(spec, "  ")


KINDS = [
    (
        "Volcano Job",
        "batch.volcano.sh/v1alpha1",
        "Job",
        f"tasks:\n- name: worker\n  template: {TEMPLATE}\n",
        ["w-worker-main-npu"],
    ),
    (
        "Volcano Job, unnamed tasks",
        "batch.volcano.sh/v1alpha1",
        "Job",
        f"tasks:\n- template: {TEMPLATE}\n- template: {TEMPLATE}\n",
        ["w-0-main-npu", "w-1-main-npu"],
    ),
    (
        "AscendJob",
        "mindxdl.gitee.com/v1",
        "AscendJob",
        f"replicaSpecs:\n  Master: {{template: {TEMPLATE}}}\n  Worker: {{template: {TEMPLATE}}}\n",
        ["w-master-main-npu", "w-worker-main-npu"],
    ),
    (
        "PyTorchJob",
        "kubeflow.org/v1",
        "PyTorchJob",
        f"pytorchReplicaSpecs:\n  Master: {{template: {TEMPLATE}}}\n  Worker: {{template: {TEMPLATE}}}\n",
        ["w-master-main-npu", "w-worker-main-npu"],
    ),
    (
        "MPIJob",
        "kubeflow.org/v2beta1",
        "MPIJob",
        f"mpiReplicaSpecs:\n  Worker: {{template: {TEMPLATE}}}\n",
        ["w-worker-main-npu"],
    ),
    ("TFJob", "kubeflow.org/v1", "TFJob", f"tfReplicaSpecs:\n  PS: {{template: {TEMPLATE}}}\n", ["w-ps-main-npu"]),
    (
        "LeaderWorkerSet",
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        f"leaderWorkerTemplate:\n  size: 2\n  leaderTemplate: {TEMPLATE}\n  workerTemplate: {TEMPLATE}\n",
        ["w-leader-main-npu", "w-worker-main-npu"],
    ),
    (
        "RayCluster",
        "ray.io/v1",
        "RayCluster",
        f"headGroupSpec: {{template: {TEMPLATE}}}\nworkerGroupSpecs:\n- groupName: npu\n  template: {TEMPLATE}\n",
        ["w-head-main-npu", "w-npu-main-npu"],
    ),
    (
        "RayJob",
        "ray.io/v1",
        "RayJob",
        f"rayClusterSpec:\n  workerGroupSpecs:\n  - groupName: g\n    template: {TEMPLATE}\n",
        ["w-g-main-npu"],
    ),
    (
        "JobSet",
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        f"replicatedJobs:\n- name: workers\n  template: {{spec: {{template: {TEMPLATE}}}}}\n",
        ["w-workers-main-npu"],
    ),
    (
        "TrainingRuntime",
        "trainer.kubeflow.org/v1alpha1",
        "TrainingRuntime",
        "template:\n  spec:\n    replicatedJobs:\n    - name: node\n"
        f"      template: {{spec: {{template: {TEMPLATE}}}}}\n",
        ["w-node-main-npu"],
    ),
    ("Deployment", "apps/v1", "Deployment", f"selector: {{}}\ntemplate: {TEMPLATE}\n", ["w-main-npu"]),
]


def _objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def _pod_claims(node: Any) -> list[str]:
    """Every resourceClaimTemplateName anywhere in `node`, in document order."""
    if isinstance(node, dict):
        own = [node["resourceClaimTemplateName"]] if "resourceClaimTemplateName" in node else []
        return own + [name for value in node.values() for name in _pod_claims(value)]
    if isinstance(node, list):
        return [name for item in node for name in _pod_claims(item)]
    return []


@pytest.mark.parametrize(
    ("api_version", "kind", "spec", "templates"), [k[1:] for k in KINDS], ids=[k[0] for k in KINDS]
)
def test_each_pod_template_gets_its_own_claim_template(
    api_version: str, kind: str, spec: str, templates: list[str]
) -> None:
    result = migrate_text(manifest(api_version, kind, spec))
    *made, workload = _objects(result.text)
    assert [t["metadata"] for t in made] == [{"name": name, "namespace": "ml"} for name in templates]
    assert {t["kind"] for t in made} == {"ResourceClaimTemplate"}
    assert _pod_claims(workload) == templates
    assert "huawei.com/Ascend910" not in result.text.split("---")[-1]
    assert (result.left_behind, len(result.changes), result.workloads) == ((), len(templates), 1)
    assert migrate_text(result.text).text == result.text


def test_replica_label_names_the_replica_type() -> None:
    spec = f"pytorchReplicaSpecs:\n  Worker: {{template: {TEMPLATE}}}\n"
    (change,) = migrate_text(manifest("kubeflow.org/v1", "PyTorchJob", spec), source="p.yaml").changes
    assert str(change) == (
        'p.yaml:6: kubeflow.org/v1/PyTorchJob ml/w, replica type "Worker", container "main": huawei.com/Ascend910: 8 '
        '-> claim "main-npu" from ResourceClaimTemplate ml/w-worker-main-npu'
    )


TRAIN_JOB = """\
apiVersion: trainer.kubeflow.org/v1alpha1
kind: TrainJob
metadata: {name: tj, namespace: ml}
spec:
  runtimeRef: {name: torch-distributed}
  trainer:
    numNodes: 2
    resourcesPerNode:
      limits:
        huawei.com/Ascend910: 8
"""


def test_train_job_is_left_behind_with_the_reason() -> None:
    result = migrate_text(TRAIN_JOB, source="t.yaml")
    assert result.text == TRAIN_JOB
    (warning,) = result.left_behind
    assert warning.startswith(
        "t.yaml:10: document 1: trainer.kubeflow.org/v1alpha1/TrainJob ml/tj: spec.trainer.resourcesPerNode.limits "
        "still asks for huawei.com/Ascend910: its pods come from the TrainingRuntime it references"
    )


def test_every_list_item_keeps_its_warning() -> None:
    migrated = manifest("apps/v1", "Deployment", f"selector: {{}}\ntemplate: {TEMPLATE}\n")
    text = "apiVersion: v1\nkind: List\nitems:\n" + textwrap.indent(
        yaml.safe_dump([yaml.safe_load(migrated), yaml.safe_load(TRAIN_JOB)], sort_keys=False), ""
    )
    result = migrate_text(text, source="l.yaml")
    assert len(result.changes) == 1
    assert len(result.left_behind) == 1 and "TrainJob ml/tj" in result.left_behind[0]


LIVE_POD = """\
apiVersion: v1
kind: Pod
metadata:
  name: train-7d9f-abcde
  namespace: ml
  uid: 0b6f1c2e-5d41-4f8a-9e0b-1b2c3d4e5f60
  ownerReferences:
  - {apiVersion: apps/v1, kind: ReplicaSet, name: train-7d9f, uid: 9f8e7d6c, controller: true}
spec:
  nodeName: node-1
  containers:
  - name: trainer
    resources:
      limits: {huawei.com/Ascend910: 8}
status:
  phase: Running
"""
LIVE = [
    (
        "owned by a controller",
        LIVE_POD,
        "a live Pod (metadata.uid, metadata.ownerReferences, status), and Pods are immutable: migrate the manifest "
        "of its controller, ReplicaSet train-7d9f (or of what owns that), which replaces the Pod",
    ),
    (
        "a ReplicaSet a Deployment owns",
        "apiVersion: apps/v1\nkind: ReplicaSet\nmetadata:\n  name: train-7d9f\n  namespace: ml\n  ownerReferences:\n"
        "  - {apiVersion: apps/v1, kind: Deployment, name: train, uid: 1a2b, controller: true}\nspec:\n  template:\n"
        "    spec:\n      containers:\n      - name: trainer\n        resources:\n"
        "          limits: {huawei.com/Ascend910: 8}\n",
        "its controller, Deployment train (metadata.ownerReferences), puts back its own pod template: migrate the "
        "Deployment's manifest instead",
    ),
]


@pytest.mark.parametrize(("text", "reason"), [c[1:] for c in LIVE], ids=[c[0] for c in LIVE])
def test_objects_from_the_cluster_that_migrating_cannot_change_are_left_behind(text: str, reason: str) -> None:
    result = migrate_text(text, source="live.yaml")
    assert (result.text, result.changes, result.warnings) == (text, (), ())
    (warning,) = result.left_behind
    assert warning.endswith(f"still asks for huawei.com/Ascend910: {reason}; left unchanged")


def test_a_live_pod_without_an_owner_is_left_behind() -> None:
    owner = "  - {apiVersion: apps/v1, kind: ReplicaSet, name: train-7d9f, uid: 9f8e7d6c, controller: true}\n"
    text = LIVE_POD.replace("  ownerReferences:\n" + owner, "")
    (warning,) = migrate_text(text, source="live.yaml").left_behind
    assert warning == (
        "live.yaml:12: document 1: v1/Pod ml/train-7d9f-abcde: spec.containers[0].resources.limits still asks for "
        "huawei.com/Ascend910: a live Pod (metadata.uid, status), and Pods are immutable: migrate the manifest it "
        "was created from, then delete the Pod and create it again; left unchanged"
    )


SHAPES = [
    (
        "tasks not a list",
        manifest("batch.volcano.sh/v1alpha1", "Job", "tasks: {template: {}}\n"),
        "f.yaml:5: document 1 (batch.volcano.sh/v1alpha1/Job ml/w): spec.tasks must be a list, got a mapping",
    ),
    (
        "replica spec not a mapping",
        manifest("kubeflow.org/v1", "PyTorchJob", "pytorchReplicaSpecs:\n  Worker: 3\n"),
        "f.yaml:6: document 1 (kubeflow.org/v1/PyTorchJob ml/w): spec.pytorchReplicaSpecs.Worker must be a mapping, "
        "got int 3",
    ),
    (
        "template a string",
        manifest("apps/v1", "Deployment", "template: nope\n"),
        "f.yaml:5: document 1 (apps/v1/Deployment ml/w): spec.template must be a mapping, got str 'nope'",
    ),
]


@pytest.mark.parametrize(("text", "message"), [s[1:] for s in SHAPES], ids=[s[0] for s in SHAPES])
def test_template_path_of_the_wrong_type_is_refused(text: str, message: str) -> None:
    with pytest.raises(MigrateError) as caught:
        migrate_text(text, source="f.yaml")
    assert str(caught.value) == message


# --- resource names, classes, count 0, slices
# -----------------------------------------------------------


def pod(limits: str, env: str = "", extra: str = "") -> str:
    return (
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        f"{extra}  containers:\n  - name: c\n    image: i\n{env}    resources:\n      limits: {limits}\n"
    )


def _devices(text: str) -> list[tuple[str, int]]:
    return [
        (r["exactly"]["deviceClassName"], r["exactly"]["count"])
        for t in _objects(text)
        if t["kind"] == "ResourceClaimTemplate"
        for r in t["spec"]["spec"]["devices"]["requests"]
    ]


CLASSES = [
    ("910", "{huawei.com/Ascend910: 2}", Options(), [("ascend910.npu.huawei.com", 2)]),
    ("310P", "{huawei.com/Ascend310P: 1}", Options(), [("ascend310p.npu.huawei.com", 1)]),
    ("310", "{huawei.com/Ascend310: 4}", Options(), [("ascend310.npu.huawei.com", 4)]),
    ("override", "{huawei.com/Ascend310: 4}", Options(device_class="npu.huawei.com"), [("npu.huawei.com", 4)]),
    ("not selected", "{huawei.com/Ascend310: 4}", Options(resource_names=("huawei.com/Ascend910",)), []),
]


@pytest.mark.parametrize(("limits", "options", "devices"), [c[1:] for c in CLASSES], ids=[c[0] for c in CLASSES])
def test_each_resource_gets_its_own_class(limits: str, options: Options, devices: list[tuple[str, int]]) -> None:
    assert _devices(migrate_text(pod(limits), options).text) == devices


def test_count_zero_drops_the_entry_and_adds_no_claim() -> None:
    result = migrate_text(pod("{huawei.com/Ascend910: 0, cpu: 1}"), source="z.yaml")
    (obj,) = _objects(result.text)
    assert obj["spec"]["containers"][0]["resources"] == {"limits": {"cpu": 1}}
    assert "resourceClaims" not in obj["spec"]
    assert [str(c) for c in result.changes] == [
        'z.yaml:9: Pod p, container "c": huawei.com/Ascend910: 0 -> entry dropped, no claim'
    ]
    assert migrate_text(result.text).changes == ()


SAME_310P = 'device.attributes["npu.huawei.com"].deviceType == "Ascend310P"'
SAME_910 = 'device.attributes["npu.huawei.com"].deviceType.startsWith("Ascend910")'
MEMORY = 'device.capacity["npu.huawei.com"].memCapacity.compareTo(quantity("{}")) >= 0'
CORES = 'device.capacity["npu.huawei.com"].aiCore.compareTo(quantity("{}")) >= 0'
VNPU_REQUESTS = [
    (
        "Volcano 310P memory",
        "{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 4096}",
        1,
        [SAME_310P, MEMORY.format("4Gi")],
    ),
    (
        "memory in MiB",
        "{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 3000}",
        1,
        [SAME_310P, MEMORY.format("3000Mi")],
    ),
    (
        "910 memory and cores, two vNPUs",
        "{huawei.com/Ascend910: 2, huawei.com/Ascend910-memory: '12288', huawei.com/Ascend910-core: 5}",
        2,
        [SAME_910, MEMORY.format("12Gi"), CORES.format("5")],
    ),
]


def _vnpu_requests(text: str) -> list[tuple[str, int, list[str]]]:
    return [
        (
            r["exactly"]["deviceClassName"],
            r["exactly"]["count"],
            [s["cel"]["expression"] for s in r["exactly"]["selectors"]],
        )
        for t in _objects(text)
        if t["kind"] == "ResourceClaimTemplate"
        for r in t["spec"]["spec"]["devices"]["requests"]
    ]


@pytest.mark.parametrize(
    ("limits", "count", "selectors"), [v[1:] for v in VNPU_REQUESTS], ids=[v[0] for v in VNPU_REQUESTS]
)
def test_hami_and_volcano_vnpu_requests_become_vnpu_claims_sized_by_cel(
    limits: str, count: int, selectors: list[str]
) -> None:
    result = migrate_text(pod(limits), Options(device_class="npu.huawei.com"))
    assert _vnpu_requests(result.text) == [("vnpu.npu.huawei.com", count, selectors)]
    (obj,) = [o for o in _objects(result.text) if o["kind"] == "Pod"]
    assert obj["spec"]["containers"][0]["resources"] == {"claims": [{"name": "c-npu"}]}, "the slices go too"
    assert migrate_text(result.text).changes == ()


def test_the_selectors_take_vnpus_of_the_family_that_hold_the_request() -> None:
    """Evaluated by the scheduler stand-in's CEL against vNPU devices as the driver publishes
    them."""
    result = migrate_text(pod("{huawei.com/Ascend910: 1, huawei.com/Ascend910-memory: 12288}"))
    ((_, _, selectors),) = _vnpu_requests(result.text)
    matchers = [cel_matcher(s) for s in selectors]

    def device(device_type: str, memory: str) -> PublishedDevice:
        entry = {
            "name": "npu-0-vnpu-100",
            "attributes": {"deviceType": {"string": device_type}},
            "capacity": {"memCapacity": {"value": memory}, "aiCore": {"value": "5"}},
        }
        return PublishedDevice(driver="npu.huawei.com", pool="node", entry=entry)

    def fits(d: PublishedDevice) -> bool:
        return all(m(d) for m in matchers)

    assert fits(device("Ascend910B", "16Gi")) and fits(device("Ascend910", "12Gi"))
    assert not fits(device("Ascend910B", "8Gi")) and not fits(device("Ascend310P", "24Gi"))


def test_a_vnpu_request_with_count_zero_drops_every_entry() -> None:
    result = migrate_text(pod("{huawei.com/Ascend310P: 0, huawei.com/Ascend310P-memory: 4096, cpu: 1}"))
    (obj,) = _objects(result.text)
    assert obj["spec"]["containers"][0]["resources"] == {"limits": {"cpu": 1}}


REFUSED = [
    (
        "static template slice",
        pod("{huawei.com/Ascend910: 1, huawei.com/Ascend910-2c: 1}"),
        'f.yaml:9: document 1 (Pod p), container "c": asks for huawei.com/Ascend910 with the NPU slice resource '
        "huawei.com/Ascend910-2c, which names no vNPU size; a DRA claim can ask for a vNPU by "
        "huawei.com/Ascend910-memory or huawei.com/Ascend910-core only: keep it on the device plugin",
    ),
    (
        "memory of another family",
        pod("{huawei.com/Ascend910: 1, huawei.com/Ascend310P-memory: 4096}"),
        'f.yaml:9: document 1 (Pod p), container "c": asks for huawei.com/Ascend910 with the NPU slice resource '
        "huawei.com/Ascend310P-memory, which names no vNPU size; a DRA claim can ask for a vNPU by "
        "huawei.com/Ascend910-memory or huawei.com/Ascend910-core only: keep it on the device plugin",
    ),
    (
        "memory 0",
        pod("{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 0}"),
        'f.yaml:9: document 1 (Pod p), container "c": huawei.com/Ascend310P-memory must be 1 or more MB, got 0',
    ),
    (
        "memory not a number",
        pod("{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 4Gi}"),
        'f.yaml:9: document 1 (Pod p), container "c": limits[huawei.com/Ascend310P-memory] must be a whole number '
        'of MB (0 or more), got "4Gi"',
    ),
    (
        "two NPU kinds",
        pod("{huawei.com/Ascend310P: 1, huawei.com/Ascend910: 1}"),
        'f.yaml:9: document 1 (Pod p), container "c": asks for huawei.com/Ascend910 and huawei.com/Ascend310P; '
        "migrate one of them at a time with --resource-name",
    ),
]


@pytest.mark.parametrize(("text", "message"), [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_containers_migrate_cannot_express_are_refused(text: str, message: str) -> None:
    with pytest.raises(MigrateError) as caught:
        migrate_text(text, source="f.yaml")
    assert str(caught.value) == message


def test_slices_alone_are_not_touched() -> None:
    text = pod("{huawei.com/Ascend910-2c: 1}")
    result = migrate_text(text)
    assert (result.text, result.changes, result.left_behind) == (text, (), ())
    assert result.seen == {"huawei.com/Ascend910-2c"}


# --- init containers
# -----------------------------------------------------------------------------------


def _pod_of(init: list[str], main: list[str]) -> str:
    """A Pod whose init containers and containers are given as flow mappings."""
    lists = "".join(
        f"  {key}:\n" + "".join(f"  - {c}\n" for c in cs)
        for key, cs in (("initContainers", init), ("containers", main))
        if cs
    )
    return f"apiVersion: v1\nkind: Pod\nmetadata: {{name: p, namespace: ml}}\nspec:\n{lists}"


def _npu(name: str, count: int, resource: str = "Ascend910", extra: str = "", memory: int | None = None) -> str:
    size = f", huawei.com/{resource}-memory: {memory}" if memory else ""
    return f"{{name: {name}{extra}, resources: {{limits: {{huawei.com/{resource}: {count}{size}}}}}}}"


INIT = [
    (
        "the smallest container claim that holds the request",
        [_npu("warmup", 1)],
        [_npu("prefill", 4), _npu("decode", 2)],
        {"warmup": ["decode-npu"], "prefill": ["prefill-npu"], "decode": ["decode-npu"]},
        [],
    ),
    (
        "a request no container claim holds gets its own, with a warning",
        [_npu("warmup", 8)],
        [_npu("train", 4)],
        {"warmup": ["warmup-npu"], "train": ["train-npu"]},
        [
            'l:6: document 1: Pod ml/p, init container "warmup": its 8 huawei.com/Ascend910 fit in no claim of a '
            "container that starts after it, so it gets a claim of its own and the pod holds 8 + 4 at once, where "
            "the device plugin needed max(8, 4): lower its request to share a claim"
        ],
    ),
    (
        "alone it keeps its claim, quietly",
        [_npu("warmup", 2)],
        ["{name: web}"],
        {"warmup": ["warmup-npu"], "web": []},
        [],
    ),
    (
        "a sidecar runs beside the containers: its own claim",
        [_npu("monitor", 1, extra=", restartPolicy: Always")],
        [_npu("train", 2)],
        {"monitor": ["monitor-npu"], "train": ["train-npu"]},
        [],
    ),
    (
        "a later init container shares an earlier one's claim",
        [_npu("a", 4), _npu("b", 4)],
        [_npu("train", 2)],
        {"a": ["a-npu"], "b": ["a-npu"], "train": ["train-npu"]},
        [
            'l:6: document 1: Pod ml/p, init container "a": its 4 huawei.com/Ascend910 fit in no claim of a '
            "container that starts after it, so it gets a claim of its own and the pod holds 4 + 2 at once, where "
            "the device plugin needed max(4, 2): lower its request to share a claim"
        ],
    ),
    (
        "vNPUs at least as large",
        [_npu("warmup", 1, "Ascend310P", memory=4096)],
        [_npu("serve", 1, "Ascend310P", memory=8192)],
        {"warmup": ["serve-npu"], "serve": ["serve-npu"]},
        [],
    ),
    (
        "another resource is another device",
        [_npu("warmup", 1, "Ascend310P")],
        [_npu("train", 2)],
        {"warmup": ["warmup-npu"], "train": ["train-npu"]},
        [],
    ),
]


@pytest.mark.parametrize(("init", "main", "claims", "warnings"), [c[1:] for c in INIT], ids=[c[0] for c in INIT])
def test_init_containers_share_a_claim_where_their_request_fits(
    init: list[str], main: list[str], claims: dict[str, list[str]], warnings: list[str]
) -> None:
    result = migrate_text(_pod_of(init, main), source="l")
    *templates, pod = _objects(result.text)
    spec = pod["spec"]
    used = {
        c["name"]: [x["name"] for x in c.get("resources", {}).get("claims", [])]
        for c in spec["initContainers"] + spec["containers"]
    }
    assert used == claims
    own = sorted({name for names in claims.values() for name in names})
    assert sorted(c["name"] for c in spec["resourceClaims"]) == own
    assert sorted(t["metadata"]["name"] for t in templates) == [f"p-{name}" for name in own]
    assert list(result.warnings) == warnings
    assert migrate_text(result.text).changes == ()


def test_a_shared_claim_is_named_in_the_change() -> None:
    result = migrate_text(_pod_of([_npu("warmup", 1)], [_npu("train", 2)]), source="l")
    assert [str(change) for change in result.changes] == [
        'l:6: Pod ml/p, init container "warmup": huawei.com/Ascend910: 1 -> claim "train-npu" of container "train" '
        "(ResourceClaimTemplate ml/p-train-npu), which starts after it",
        'l:8: Pod ml/p, container "train": huawei.com/Ascend910: 2 -> claim "train-npu" from ResourceClaimTemplate '
        "ml/p-train-npu",
    ]


# --- runtime warnings
# -----------------------------------------------------------------------------------

ANNOTATION_ENV = """\
    env:
    - name: ASCEND_VISIBLE_DEVICES
      valueFrom:
        fieldRef:
          fieldPath: metadata.annotations['huawei.com/Ascend910']
"""


def test_runtime_breakage_is_named_per_workload_and_container() -> None:
    text = pod("{huawei.com/Ascend910: 1}", env=ANNOTATION_ENV, extra="  schedulerName: volcano\n")
    result = migrate_text(text, source="r.yaml")
    assert result.warnings == (
        "r.yaml:5: document 1: Pod p: schedulerName volcano must support DRA resource claims (Volcano needs its DRA "
        "support enabled), or the pods stay Pending",
    )
    assert result.unresolved == (
        'r.yaml:13: document 1: Pod p, container "c": env ASCEND_VISIBLE_DEVICES reads the pod annotation '
        "huawei.com/Ascend910, which nothing sets under DRA; drop it: the claim's CDI spec injects "
        "ASCEND_VISIBLE_DEVICES",
    )


def test_unmigrated_workloads_get_no_runtime_warning() -> None:
    text = pod("{cpu: 1}", env=ANNOTATION_ENV, extra="  schedulerName: volcano\n")
    result = migrate_text(text)
    assert (result.warnings, result.unresolved) == ((), ())


def test_a_migrated_workload_that_still_reads_the_annotation_stays_unresolved() -> None:
    migrated = migrate_text(pod("{huawei.com/Ascend910: 1}", env=ANNOTATION_ENV)).text
    again = migrate_text(migrated, source="r.yaml")
    assert (again.text, again.changes, again.warnings) == (migrated, (), ())
    assert again.unresolved == (
        'r.yaml:26: document 2: Pod p, container "c": env ASCEND_VISIBLE_DEVICES reads the pod annotation '
        "huawei.com/Ascend910, which nothing sets under DRA; drop it: the claim's CDI spec injects "
        "ASCEND_VISIBLE_DEVICES",
    )
    assert migrate_text(migrated.replace(ANNOTATION_ENV, "")).unresolved == ()


def _manifest_for(group: str, kind: str, path: str, pod_spec: dict[str, Any]) -> str:
    """A `kind` object holding `pod_spec` at the first template path the kind table names."""
    obj: dict[str, Any] = {"apiVersion": f"{group}/v1" if group else "v1", "kind": kind, "metadata": {"name": "w"}}
    node = obj
    steps = path.split(".")
    for number, step in enumerate(steps, start=1):
        key = step.removesuffix("[]").removesuffix("{}")
        child: dict[str, Any] = pod_spec if number == len(steps) else {}
        if step.endswith("[]"):
            child = {"name": "r", **child}
            node[key] = [child]
        else:
            node[key] = {"Worker": child} if step.endswith("{}") else child
        node = child
    return yaml.safe_dump(obj, sort_keys=False)


@pytest.mark.parametrize(("group", "kind"), sorted(WORKLOAD_KINDS))
def test_a_volcano_scheduler_is_named_for_every_kind_with_a_pod_template(group: str, kind: str) -> None:
    containers = [{"name": "c", "resources": {"limits": {"huawei.com/Ascend910": 1}}}]
    path = WORKLOAD_KINDS[(group, kind)][0].path
    result = migrate_text(_manifest_for(group, kind, path, {"schedulerName": "volcano", "containers": containers}))
    assert len(result.changes) == 1
    assert [w for w in result.warnings if ": schedulerName volcano must support DRA resource claims" in w] != []


QUEUE = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: Queue
metadata: {name: training}
spec:
  weight: 1
  capability:
    cpu: 100
    huawei.com/Ascend910: 16
  deserved: {huawei.com/Ascend910: 8}
  guarantee:
    resource: {huawei.com/Ascend910: 4}
"""


def test_a_volcano_queue_s_npu_quota_stays_unresolved_naming_only_what_it_mentions() -> None:
    result = migrate_text(QUEUE, source="q.yaml")
    assert (result.text, result.warnings, result.left_behind) == (QUEUE, (), ())
    why = (
        "counts only device-plugin pods; Volcano counts no DRA claims against a Queue, so pods whose NPUs come "
        "from claims are not held to it"
    )
    queue = "q.yaml:{}: document 1: scheduling.volcano.sh/v1beta1/Queue training: spec.{}[huawei.com/Ascend910] {}: {}"
    assert result.unresolved == (
        queue.format(8, "capability", why, '"16"'),
        queue.format(9, "deserved", why, '"8"'),
        queue.format(11, "guarantee.resource", why, '"4"'),
    )


def test_an_object_of_another_kind_is_said_to_mention_only_the_names_it_does() -> None:
    text = "apiVersion: example.com/v1\nkind: Budget\nmetadata: {name: b}\nspec: {huawei.com/Ascend310P: 2}\n"
    assert migrate_text(text, source="b.yaml").warnings == (
        "b.yaml:1: document 1: example.com/v1/Budget b mentions huawei.com/Ascend310P but is not a kind migrate "
        "rewrites; left unchanged",
    )


QUOTAS = [
    (
        "ResourceQuota",
        "apiVersion: v1\nkind: ResourceQuota\nmetadata: {name: q, namespace: ml}\nspec:\n  hard:\n"
        "    requests.huawei.com/Ascend310P: 4\n",
        "q.yaml:6: document 1: v1/ResourceQuota ml/q: spec.hard[requests.huawei.com/Ascend310P] counts only "
        "device-plugin pods; DRA claims count against "
        'spec.hard[ascend310p.npu.huawei.com.deviceclass.resource.k8s.io/devices]: "4"',
    ),
    (
        "LimitRange",
        "apiVersion: v1\nkind: LimitRange\nmetadata: {name: l}\nspec:\n  limits:\n  - type: Container\n"
        "    max: {huawei.com/Ascend910: 8}\n",
        "q.yaml:7: document 1: v1/LimitRange l: spec.limits[0].max[huawei.com/Ascend910] applies only to "
        "device-plugin containers; DRA has no per-container limit: cap claims with a ResourceQuota on "
        "ascend910.npu.huawei.com.deviceclass.resource.k8s.io/devices",
    ),
]


@pytest.mark.parametrize(("text", "warning"), [q[1:] for q in QUOTAS], ids=[q[0] for q in QUOTAS])
def test_quota_entries_show_the_dra_equivalent(text: str, warning: str) -> None:
    result = migrate_text(text, source="q.yaml")
    assert (result.text, result.warnings, result.left_behind) == (text, (warning,), ())


def test_a_job_level_scheduler_is_named_once_for_all_its_templates() -> None:
    spec = f"tasks:\n- name: a\n  template: {TEMPLATE}\n- name: b\n  template: {TEMPLATE}\n"
    result = migrate_text(manifest("batch.volcano.sh/v1alpha1", "Job", spec), source="v.yaml")
    assert result.warnings == (
        "v.yaml:1: document 1: batch.volcano.sh/v1alpha1/Job ml/w: schedulerName volcano must support DRA "
        "resource claims (Volcano needs its DRA support enabled), or the pods stay Pending",
    )


@pytest.mark.parametrize(
    ("limits", "count", "capacity"),
    [
        ("{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 4096}", 1, {"memory": "4Gi"}),
        (
            "{huawei.com/Ascend310P: 1, huawei.com/Ascend310P-memory: 3000, huawei.com/Ascend310P-core: 2}",
            1,
            {"memory": "3000Mi", "aiCore": "2"},
        ),
    ],
)
def test_with_a_shared_class_hami_requests_for_one_npu_become_a_share(
    limits: str, count: int, capacity: dict[str, str]
) -> None:
    result = migrate_text(pod(limits), Options(shared_device_class="shared.npu.huawei.com"))
    (template,) = [t for t in _objects(result.text) if t["kind"] == "ResourceClaimTemplate"]
    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == "shared.npu.huawei.com"
    assert request["exactly"]["count"] == count
    assert request["exactly"]["capacity"] == {"requests": capacity}
    assert [s["cel"]["expression"] for s in request["exactly"]["selectors"]] == [SAME_310P]
    assert migrate_text(result.text).changes == ()


def test_a_hami_request_for_several_npus_stays_a_vnpu_claim_with_a_shared_class() -> None:
    """A container gets one shared NPU: two shares would hand it two CDI devices that each set
    ASCEND_VISIBLE_DEVICES."""
    limits = "{huawei.com/Ascend910: 2, huawei.com/Ascend910-memory: '12288'}"
    result = migrate_text(pod(limits), Options(shared_device_class="shared.npu.huawei.com"))
    assert _vnpu_requests(result.text) == [("vnpu.npu.huawei.com", 2, [SAME_910, MEMORY.format("12Gi")])]
