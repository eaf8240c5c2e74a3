"""Fixtures of the backend tests: the fake libdcmi.so builds, the file describing its host, and a
hang."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.fake_hardware import CONFIG_ENV, build


@pytest.fixture(scope="session")
def fake_builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Both variants of the fake libdcmi.so, compiled once per session (a missing gcc fails here,
    loudly)."""
    root = tmp_path_factory.mktemp("fakedcmi")
    return {"current": build(root / "current"), "legacy": build(root / "legacy", legacy=True)}


@pytest.fixture
def config_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the fake libdcmi.so reads its host description ($FAKE_DCMI_CONFIG)."""
    path = tmp_path / "fake-dcmi.conf"
    monkeypatch.setenv(CONFIG_ENV, str(path))
    return path


@pytest.fixture
def hung_create(tmp_path: Path) -> Iterator[Path]:
    """The file that keeps the fake's dcmi_create_vdevice from returning while it exists; removed at
    the end."""
    held = tmp_path / "create-held"
    held.touch()
    yield held
    held.unlink(missing_ok=True)
