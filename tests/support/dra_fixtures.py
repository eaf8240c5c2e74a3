"""Fixtures of the DRA integration tests, loaded with `pytest_plugins =
["tests.support.dra_fixtures"]`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.dra import Workspace, fake_api_with_node, temporary_workspace
from tests.support.fakeapi import FakeKubeAPI


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    """The fake API server on 127.0.0.1 with this node's Node object."""
    with fake_api_with_node() as api:
        yield api


@pytest.fixture
def workspace(fake_api: FakeKubeAPI) -> Iterator[Workspace]:
    """A short root (Unix socket paths must stay under 108 bytes) with the atlas-800t-a2
    inventory."""
    with temporary_workspace(fake_api) as ws:
        yield ws
