"""The installed Ascend driver's version, from the version file its installer writes."""

from __future__ import annotations

import logging
from pathlib import Path

DRIVER_VERSION_FILE = Path("/usr/local/Ascend/driver/version.info")

log = logging.getLogger(__name__)


def parse_version_info(text: str) -> str | None:
    """Pure: the value of the `Version=` line of a driver version.info; None when it has none."""
    for line in text.splitlines():
        key, separator, value = line.partition("=")
        if separator and key.strip() == "Version" and value.strip():
            return value.strip()
    return None


def read_driver_version(path: Path) -> str | None:
    """The driver version `path` names; None (logged) when the file is missing, unreadable or has
    none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as error:
        log.info("driver version unknown: cannot read %s: %s", path, error.strerror, extra={"error": str(error)})
        return None
    version = parse_version_info(text)
    if version is None:
        log.info("driver version unknown: %s has no Version= line", path)
    return version
