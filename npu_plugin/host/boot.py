"""Which boot this is: the kernel's random boot id, which changes at every reboot."""

from __future__ import annotations

from pathlib import Path


def read_boot_id(path: Path = Path("/proc/sys/kernel/random/boot_id")) -> str:
    """The boot id, or `unknown` where the kernel does not offer one."""
    try:
        return path.read_text().strip()
    except OSError:
        return "unknown"
