"""atomic.make_directories: exact modes, whatever the umask is at that instant."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from npu_plugin.host.atomic import make_directories, remove_file, write_atomic


def test_missing_levels_get_exactly_the_mode_and_existing_ones_keep_theirs(tmp_path: Path) -> None:
    kept = tmp_path / "kubelet"
    kept.mkdir(mode=0o711)
    kept.chmod(0o711)
    previous = os.umask(0o177)  # what binding a socket sets for a moment, process-wide
    try:
        make_directories(kept / "plugins" / "npu.huawei.com", 0o750)
    finally:
        os.umask(previous)
    modes = [stat.S_IMODE(p.stat().st_mode) for p in (kept, kept / "plugins", kept / "plugins" / "npu.huawei.com")]
    assert modes == [0o711, 0o750, 0o750]
    make_directories(kept / "plugins", 0o700)  # there already: left alone
    assert stat.S_IMODE((kept / "plugins").stat().st_mode) == 0o750


@pytest.mark.parametrize("durable", [True, False])
def test_a_replaced_file_has_the_new_content_and_mode_and_no_temp_is_left(tmp_path: Path, durable: bool) -> None:
    target = tmp_path / "spec.json"
    target.write_text("old")
    write_atomic(target, b"new", 0o600, durable=durable)
    assert (target.read_bytes(), target.stat().st_mode & 0o777) == (b"new", 0o600)
    assert [p.name for p in tmp_path.iterdir()] == ["spec.json"]
    assert remove_file(target, durable=durable) is True
    assert remove_file(target, durable=durable) is False
