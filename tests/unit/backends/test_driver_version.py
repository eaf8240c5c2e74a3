"""Reading the driver's version.info."""

from __future__ import annotations

from pathlib import Path

import pytest

from npu_plugin.backends.driver_version import parse_version_info, read_driver_version


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Version=24.1.rc2\nascendhal_version=7.35.23\npackage_version=24.1.rc2\n", "24.1.rc2"),
        ("Innerversion=V100R001C19SPC002B217\nVersion=23.0.3\n", "23.0.3"),
        ("Version = 24.1.rc3 \n", "24.1.rc3"),
        ("package_version=24.1.rc2\n", None),
        ("Version=\n", None),
        ("version=24.1.rc2\n", None),
        ("", None),
        ("\x00\xff garbage", None),
    ],
)
def test_parse_version_info(text: str, expected: str | None) -> None:
    assert parse_version_info(text) == expected


def test_read_driver_version(tmp_path: Path) -> None:
    path = tmp_path / "version.info"
    assert read_driver_version(path) is None
    path.write_text("Version=24.1.rc2\n")
    assert read_driver_version(path) == "24.1.rc2"
    assert read_driver_version(tmp_path) is None  # unreadable: a directory
