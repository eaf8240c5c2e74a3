"""The e2e tier runs only when asked (scripts/test --e2e, or NPU_PLUGIN_E2E=1): it builds and starts a
real cluster (scripts/cluster) as root. Otherwise each of its tests is reported skipped with the reason."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from tests.e2e.cluster import ENABLE, Cluster, enabled, release


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if enabled():
        return
    skip = pytest.mark.skip(
        reason=f"e2e tier not requested: it runs a real cluster (scripts/cluster); use scripts/test --e2e or {ENABLE}=1"
    )
    for item in items:
        if item.get_closest_marker("e2e") is not None:
            item.add_marker(skip)


def cluster_in(mode: str, options: Sequence[str] = ()) -> Iterator[Cluster]:
    """One cluster for a test module, the plugin deployed in `mode` with scripts/cluster's plugin `options`;
    taken down after the module."""
    cluster = Cluster(release(), mode, options)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
