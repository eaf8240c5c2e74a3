"""The e2e tier runs only when asked (NPU_PLUGIN_E2E=1; scripts/test with no selection sets it for its e2e parts): it
builds and starts a real cluster (scripts/cluster) as root. Otherwise each of its tests is reported skipped with
the reason.

One cluster serves the whole session (one release): the first module brings it up, each later module redeploys
the plugin in its own mode and options, and it goes down when the session ends, however it ends. So each module
must leave the cluster as it found it; `cluster_in` checks that after the module."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tests.e2e.cluster import ENABLE, Cluster, enabled, release

# The modules in the order that redeploys the plugin least: each next to those of the same mode and options
# (test_migration starts in dra and ends in device-plugin or dra). Modules not listed run after these.
ORDER = (
    "test_dra_mode",
    "test_faults",
    "test_migration",
    "test_device_plugin_mode",
    "test_both_mode",
    "test_health_and_status",
    "test_vnpu",
)
# Modules whose cluster differs in its feature gates: last, since the session's cluster is replaced for them.
LAST = ("test_vnpu_gate_off",)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent

    def rank(item: pytest.Item) -> int:
        if item.path.parent != here:
            return -1
        stem = item.path.stem
        if stem in LAST:
            return len(ORDER) + 1 + LAST.index(stem)
        return ORDER.index(stem) if stem in ORDER else len(ORDER)

    items.sort(key=rank)  # stable: the tests of a module keep their order
    if enabled():
        return
    skip = pytest.mark.skip(
        reason=f"e2e tier not requested: it runs a real cluster (scripts/cluster); set {ENABLE}=1, or run scripts/test "
        "with no selection"
    )
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(skip)


class _Session:
    """The session's cluster: None until a module asks for one; `failed` once its `up` failed, so that the
    later modules say so at once instead of trying again."""

    cluster: Cluster | None = None
    failed: str | None = None


def cluster_in(mode: str, options: Sequence[str] = (), feature_gates: str = "") -> Iterator[Cluster]:
    """The session's cluster for a test module, the plugin deployed in `mode` with scripts/cluster's plugin
    `options`: brought up by the first module, redeployed for each later one (`scripts/cluster deploy`, which
    also writes the fake inventory afresh and relabels the node; a deploy that changes nothing rolls no pod).
    `feature_gates` (NAME=BOOL,... over the release's) belong to the components, so a module asking for other
    gates than the running cluster's gets a new cluster in its place (those modules run last, see `LAST`).
    After the module, whatever it left behind (see `Cluster.footprint`) fails it and is cleaned up."""
    if _Session.failed is not None:
        raise RuntimeError(f"the cluster did not come up earlier in this session: {_Session.failed}")
    cluster = _Session.cluster
    if cluster is not None and cluster.feature_gates != feature_gates:
        cluster.down()
        cluster = _Session.cluster = None
    if cluster is None:
        cluster = _Session.cluster = Cluster(release(), mode, options, feature_gates=feature_gates)
        try:
            cluster.up()
        except Exception as error:
            _Session.failed = str(error)
            raise
    else:
        cluster.deploy(mode, options)
    before = cluster.footprint()
    yield cluster
    left = cluster.restore(before)
    assert not left, "the module left the shared cluster changed (cleaned up now):\n" + "\n".join(left)


@pytest.hookimpl(trylast=True)  # after pytest's own, which tears the module fixtures down (on Ctrl-C too)
def pytest_sessionfinish(session: pytest.Session) -> None:
    """The session's cluster goes down at its end: after the last module, a failure or Ctrl-C (and SIGTERM or
    SIGHUP, which the root conftest turns into Ctrl-C)."""
    if _Session.cluster is not None:
        _Session.cluster.down()
        _Session.cluster = None
