"""Fixtures of the DRA integration tests, loaded with `pytest_plugins = ["tests.integration.dra_fixtures"]`."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from npu_plugin.sim.fakeapi import FakeKubeAPI
from tests.integration.dra_support import NODE, Workspace, make_workspace


@pytest.fixture
def fake_api() -> Iterator[FakeKubeAPI]:
    """The fake API server on 127.0.0.1 with this node's Node object."""
    with FakeKubeAPI() as api:
        api.add_node(NODE)
        yield api


@pytest.fixture
def workspace(fake_api: FakeKubeAPI) -> Iterator[Workspace]:
    """A short root (Unix socket paths must stay under 108 bytes) with the atlas-800t-a2 inventory."""
    root = Path(tempfile.mkdtemp(prefix="dra-", dir="/tmp"))
    ws = make_workspace(root)
    fake_api.write_kubeconfig(ws.kubeconfig)
    yield ws
    shutil.rmtree(root, ignore_errors=True)
