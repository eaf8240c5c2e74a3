"""Read the cluster for `plan`: one paginated LIST per kind, `/version` and discovery, through the
project's API client; nothing is ever written. Each page is reduced to `snapshot` records as it
arrives, so memory follows the records, not the objects.

A kind the credentials may not list (403), or that the server does not serve, becomes an
`Unreadable` entry naming the missing verb and resource, and reading goes on with the others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.client import KubeClient
from npu_plugin.plan import objects
from npu_plugin.plan.objects import ShapeError
from npu_plugin.plan.snapshot import PluginPod, ServerInfo, Snapshot, Unreadable

PAGE_SIZE = 500  # as kubectl's --chunk-size
RESOURCE_GROUP = "resource.k8s.io"


@dataclass(frozen=True, slots=True)
class ListedKind:
    """A collection `plan` lists: its resource, API group and path (all namespaces)."""

    resource: str
    group: str
    path: str


# Every LIST `plan` makes; manifests/plan/clusterrole.yaml grants exactly these (a test checks it).
NODES = ListedKind("nodes", "", "/api/v1/nodes")
PODS = ListedKind("pods", "", "/api/v1/pods")
QUOTAS = ListedKind("resourcequotas", "", "/api/v1/resourcequotas")
DAEMONSETS = ListedKind("daemonsets", "apps", "/apis/apps/v1/daemonsets")
BUDGETS = ListedKind("poddisruptionbudgets", "policy", "/apis/policy/v1/poddisruptionbudgets")
SLICES = ListedKind("resourceslices", RESOURCE_GROUP, "/apis/resource.k8s.io/v1/resourceslices")
CLASSES = ListedKind("deviceclasses", RESOURCE_GROUP, "/apis/resource.k8s.io/v1/deviceclasses")
CLAIMS = ListedKind("resourceclaims", RESOURCE_GROUP, "/apis/resource.k8s.io/v1/resourceclaims")
TEMPLATES = ListedKind("resourceclaimtemplates", RESOURCE_GROUP, "/apis/resource.k8s.io/v1/resourceclaimtemplates")
LISTED = (NODES, PODS, QUOTAS, DAEMONSETS, BUDGETS, SLICES, CLASSES, CLAIMS, TEMPLATES)
VERSION_PATH, DISCOVERY_PATH = "/version", "/apis"  # non-resource URLs, read with get


class NoClusterError(Exception):
    """The API server cannot be reached or refuses the credentials: nothing can be planned."""


def read_snapshot(client: KubeClient, driver: str) -> Snapshot:
    """Everything `plan` needs; NoClusterError when even `/version` cannot be read."""
    snapshot = Snapshot(driver=driver)
    snapshot.server = ServerInfo(_version(client), _resource_versions(client, snapshot))
    for kind, take in _takers(snapshot, driver):
        try:
            for item in _list(client, kind):
                try:
                    take(item)
                except ShapeError as error:
                    snapshot.malformed.append(str(error))
        except KubeApiError as error:
            snapshot.unreadable.append(Unreadable(kind.resource, _why(kind, error)))
    return snapshot


def _version(client: KubeClient) -> tuple[int, int]:
    try:
        return client.server_version()
    except KubeApiError as error:
        if error.status in (0, 401):
            raise NoClusterError(f"cannot reach the API server: {error}") from None
        raise NoClusterError(f"cannot read the API server's version: {error}") from None


def _resource_versions(client: KubeClient, snapshot: Snapshot) -> tuple[str, ...]:
    try:
        groups = client.get_json("get /apis", DISCOVERY_PATH)
    except KubeApiError as error:
        snapshot.unreadable.append(Unreadable("discovery", f"cannot get {DISCOVERY_PATH} (discovery): {error}"))
        return ()
    for group in groups.get("groups") or []:
        if isinstance(group, dict) and group.get("name") == RESOURCE_GROUP:
            return tuple(str(v.get("version")) for v in group.get("versions") or [] if isinstance(v, dict))
    return ()


def _takers(snapshot: Snapshot, driver: str) -> list[tuple[ListedKind, Callable[[Any], None]]]:
    def keep(found: list[Any], make: Callable[[Any], Any]) -> Callable[[Any], None]:
        def take(item: Any) -> None:
            if (record := make(item)) is not None:
                found.append(record)

        return take

    def pod(item: Any) -> None:
        found = objects.pod_of(item)
        if isinstance(found, PluginPod):
            snapshot.plugin_pods.append(found)
        elif found is not None:
            snapshot.pods.append(found)

    return [
        (NODES, keep(snapshot.nodes, objects.node_of)),
        (DAEMONSETS, keep(snapshot.daemonsets, objects.daemonset_of)),
        (PODS, pod),
        (SLICES, keep(snapshot.slices, lambda item: objects.slice_of(item, driver))),
        (CLASSES, keep(snapshot.classes, lambda item: objects.device_class_of(item, driver))),
        (CLAIMS, keep(snapshot.claims, lambda item: objects.claim_of(item, driver))),
        (TEMPLATES, keep(snapshot.templates, objects.claim_template_of)),
        (BUDGETS, keep(snapshot.budgets, objects.budget_of)),
        (QUOTAS, keep(snapshot.quotas, objects.quota_of)),
    ]


def _list(client: KubeClient, kind: ListedKind) -> Iterator[Any]:
    """The items of every page of one LIST, the next page asked for while this one is read (the
    server's work on it overlaps ours). A continue token that expired (410) starts the list over
    once, as client-go's pager does."""
    with ThreadPoolExecutor(1, thread_name_prefix=f"plan-{kind.resource}") as ahead:
        token, restarted = "", False
        page = ahead.submit(_page, client, kind, token)
        while True:
            try:
                items, token = page.result()
            except KubeApiError as error:
                if error.status != 410 or restarted:
                    raise
                restarted = True
                page = ahead.submit(_page, client, kind, "")
                continue
            if token:
                page = ahead.submit(_page, client, kind, token)
            yield from items
            if not token:
                return


def _page(client: KubeClient, kind: ListedKind, token: str) -> tuple[list[Any], str]:
    """One page's items and the token of the next ("" after the last)."""
    action = f"list {kind.resource}"
    page = client.get_json(action, kind.path, {"limit": str(PAGE_SIZE)} | ({"continue": token} if token else {}))
    items, metadata = page.get("items"), page.get("metadata")
    if not isinstance(items, list) or not isinstance(metadata, dict):
        raise KubeApiError(action, 200, "malformed response: a list needs items and metadata")
    return items, str(metadata.get("continue") or "")


def _why(kind: ListedKind, error: KubeApiError) -> str:
    group = f'in API group "{kind.group}"'
    if error.status == 403:
        return f"cannot list {kind.resource}: forbidden, the credentials lack verb list on {kind.resource} {group}"
    if error.status == 404:
        return f"cannot list {kind.resource}: the API server does not serve {kind.path}"
    return f"cannot list {kind.resource}: {error}"
