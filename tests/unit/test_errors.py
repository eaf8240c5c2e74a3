"""errors.describe_os_error: every OSError the daemon reports is one line with the path and the
errno meaning."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from npu_plugin.errors import describe_os_error


@pytest.mark.parametrize(
    ("error", "path", "expected"),
    [
        (
            IsADirectoryError(errno.EISDIR, "Is a directory", "/s/checkpoint.json"),
            None,
            "/s/checkpoint.json: Is a directory (EISDIR)",
        ),
        (
            OSError(errno.ENOSPC, "No space left on device", "/s/.checkpoint.json.x.tmp"),
            Path("/s/checkpoint.json"),
            "/s/checkpoint.json: No space left on device (ENOSPC)",
        ),
        (PermissionError(errno.EACCES, "Permission denied"), None, "Permission denied (EACCES)"),
        (
            OSError(errno.EROFS, "Read-only file system", "/a", None, "/b"),
            None,
            "/a -> /b: Read-only file system (EROFS)",
        ),
        (OSError(errno.ELOOP, ""), "/s/prepare.lock", "/s/prepare.lock: Too many levels of symbolic links (ELOOP)"),
        (OSError("no errno at all"), "/x", "/x: no errno at all"),
    ],
    ids=["own-path", "path-given", "no-path", "rename", "strerror-from-errno", "no-errno"],
)
def test_one_line_with_path_and_errno_meaning(error: OSError, path: object, expected: str) -> None:
    assert describe_os_error(error, path) == expected


def test_a_real_failure_reads_the_same() -> None:
    with pytest.raises(OSError) as raised:
        Path("/proc/version/child").read_text()
    assert describe_os_error(raised.value) == "/proc/version/child: Not a directory (ENOTDIR)"
