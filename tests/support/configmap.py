"""A ConfigMap volume as the kubelet keeps it (`pkg/volume/util/atomic_writer.go`): each key is a
symbolic link `KEY -> ..data/KEY`, `..data` links to a timestamped directory holding the files, and
an update writes a new timestamped directory, points a `..data_tmp` link at it, renames that over
`..data` and removes the old directory. The file a pod reads is never written in place."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path

_serial = itertools.count()


class ConfigMapVolume:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        return self.directory / key

    def write(self, files: dict[str, str]) -> None:
        """One update, step by step as the atomic writer does it."""
        data = self.directory / "..data"
        old = data.readlink() if data.is_symlink() else None
        stamp = f"..2026_11_28_04_00_00.{next(_serial):09d}"
        (self.directory / stamp).mkdir()
        for key, text in files.items():
            (self.directory / stamp / key).write_text(text, encoding="utf-8")
        (self.directory / "..data_tmp").symlink_to(stamp)
        (self.directory / "..data_tmp").rename(data)
        for key in files:
            if not self.path(key).is_symlink():
                self.path(key).symlink_to(f"..data/{key}")
        if old is not None:
            shutil.rmtree(self.directory / old)
