"""atomic.make_directories: exact modes, whatever the umask is at that instant."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from npu_plugin.atomic import make_directories


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
