"""Chunked LISTs, discovery and RBAC refusals of the fake API server, as the real API server answers
them, read through the `kubernetes` client and raw HTTP."""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from tests.support.fakeapi import FakeKubeAPI
from tests.support.plan_cluster import node, npu_pod


@pytest.fixture
def api() -> Iterator[FakeKubeAPI]:
    with FakeKubeAPI(kubernetes_minor=36) as server:
        for index in range(5):
            server.put_object("Pod", npu_pod(f"p{index}", "n1", namespace="a" if index < 3 else "b"))
        yield server


@pytest.fixture
def core(api: FakeKubeAPI, tmp_path: Path) -> Iterator[client.CoreV1Api]:
    kubeconfig = tmp_path / "kubeconfig"
    api.write_kubeconfig(kubeconfig)
    api_client = config.new_client_from_config(str(kubeconfig))
    yield client.CoreV1Api(api_client)
    api_client.close()


def get(api: FakeKubeAPI, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(api.url + path) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_a_list_comes_in_chunks_with_continue_and_remaining_count(core: client.CoreV1Api) -> None:
    first = core.list_pod_for_all_namespaces(limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    second = core.list_pod_for_all_namespaces(limit=2, _continue=first.metadata._continue)
    third = core.list_pod_for_all_namespaces(limit=2, _continue=second.metadata._continue)
    assert [p.metadata.name for p in second.items + third.items] == ["p2", "p3", "p4"]
    assert second.metadata.remaining_item_count == 1
    assert (third.metadata._continue, third.metadata.remaining_item_count) == (None, None)
    # Every chunk is of the first chunk's resourceVersion: one consistent list.
    assert {first.metadata.resource_version, second.metadata.resource_version, third.metadata.resource_version} == {
        first.metadata.resource_version
    }


def test_the_continue_token_is_the_api_servers(core: client.CoreV1Api) -> None:
    token = core.list_pod_for_all_namespaces(limit=2).metadata._continue
    decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    assert decoded["v"] == "meta.k8s.io/v1" and decoded["start"] == "a/p1\x00" and decoded["rv"] > 0


def test_a_selector_leaves_the_remaining_count_unknown(core: client.CoreV1Api) -> None:
    page = core.list_pod_for_all_namespaces(limit=1, field_selector="metadata.namespace=a")
    assert page.metadata._continue and page.metadata.remaining_item_count is None


def test_a_namespaced_list_chunks_within_its_namespace(core: client.CoreV1Api) -> None:
    first = core.list_namespaced_pod("a", limit=2)
    rest = core.list_namespaced_pod("a", limit=2, _continue=first.metadata._continue)
    assert [p.metadata.name for p in first.items + rest.items] == ["p0", "p1", "p2"]
    assert first.metadata.remaining_item_count == 1 and rest.metadata._continue is None


def test_a_bad_or_compacted_continue_token(api: FakeKubeAPI, core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as bad:
        core.list_pod_for_all_namespaces(limit=2, _continue="not-a-token")
    assert bad.value.status == 400 and "continue key is not valid" in json.loads(bad.value.body)["message"]
    token = core.list_pod_for_all_namespaces(limit=2).metadata._continue
    api.put_object("Pod", npu_pod("p9", "n1"))
    api.compact_history()
    with pytest.raises(ApiException) as old:
        core.list_pod_for_all_namespaces(limit=2, _continue=token)
    status = json.loads(old.value.body)
    assert (old.value.status, status["reason"]) == (410, "Expired")
    assert status["message"].startswith("The provided continue parameter is too old")


def test_a_forbidden_list_answers_rbac_s_status(api: FakeKubeAPI) -> None:
    api.forbid("list", "pods")
    api.forbid("list", "resourceslices")
    assert get(api, "/api/v1/pods") == (
        403,
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": 'pods is forbidden: User "system:serviceaccount:npu-plugin:npu-plugin-plan" cannot list '
            'resource "pods" in API group "" at the cluster scope',
            "reason": "Forbidden",
            "details": {"kind": "pods"},
            "code": 403,
        },
    )
    code, status = get(api, "/apis/resource.k8s.io/v1/resourceslices")
    assert (code, status["details"]) == (403, {"kind": "resourceslices", "group": "resource.k8s.io"})
    assert status["message"].startswith('resourceslices.resource.k8s.io is forbidden: User "')
    assert get(api, "/api/v1/namespaces/a/pods/p0")[0] == 200  # only the verb refused is refused


def test_discovery_lists_the_served_groups(api: FakeKubeAPI) -> None:
    code, groups = get(api, "/apis")
    assert (code, groups["kind"]) == (200, "APIGroupList")
    served = {g["name"]: [v["version"] for v in g["versions"]] for g in groups["groups"]}
    assert served == {"resource.k8s.io": ["v1"], "apps": ["v1"], "policy": ["v1"]}


def test_the_kinds_plan_reads_are_served(api: FakeKubeAPI) -> None:
    api.put_object("Node", node("n1"))
    for path in (
        "/api/v1/nodes",
        "/api/v1/resourcequotas",
        "/apis/apps/v1/daemonsets",
        "/apis/policy/v1/poddisruptionbudgets",
        "/apis/resource.k8s.io/v1/deviceclasses",
        "/apis/resource.k8s.io/v1/resourceclaimtemplates",
    ):
        code, listed = get(api, path)
        assert code == 200 and isinstance(listed["items"], list), path
