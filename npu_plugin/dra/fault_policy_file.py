"""`--fault-policy FILE` while serving: read at start (a bad file stops the start with one line naming
the file and line), re-read whenever it changes; a bad rewrite is logged once, naming the file and
line, and the policy in force is kept."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from npu_plugin.dra.fault_policy import parse_fault_policy
from npu_plugin.dra.taints import FaultPolicy
from npu_plugin.errors import ConfigError, describe_os_error
from npu_plugin.host.fswatch import DirectoryWatch

log = logging.getLogger(__name__)


def read_fault_policy(path: Path) -> FaultPolicy:
    """The policy in `path`; ConfigError naming the flag, the file and the line otherwise."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        problem = describe_os_error(error, path) if isinstance(error, OSError) else f"{path}: not UTF-8 text"
        raise ConfigError(f"--fault-policy {problem}") from None
    return parse_fault_policy(text, f"--fault-policy {path}")


class FaultPolicyFile:
    """The policy in force; `on_change` hears (on the loop) that a rewrite replaced it."""

    def __init__(self, path: Path | None, on_change: Callable[[], None] = lambda: None) -> None:
        self.path, self._on_change = path, on_change
        self.policy = FaultPolicy() if path is None else read_fault_policy(path)
        self._rejected = ""
        self._watch: DirectoryWatch | None = None

    def start_watching(self) -> None:
        if self.path is None:
            return
        watch = DirectoryWatch()
        watch.add_file(self.path, self._reread, self._deliver)
        watch.start()
        self._watch = watch

    def stop_watching(self) -> None:
        if self._watch is not None:
            self._watch.stop()
            self._watch = None

    def _reread(self) -> FaultPolicy | None:
        assert self.path is not None
        try:
            return read_fault_policy(self.path)
        except ConfigError as error:
            if str(error) != self._rejected:  # once per bad rewrite, not once per event
                self._rejected = str(error)
                log.error(  # noqa: TRY400
                    "fault policy rewrite rejected, keeping the policy in force: %s", error, extra={"error": str(error)}
                )
            return None

    def _deliver(self, policy: FaultPolicy | None) -> None:
        if policy is None or policy == self.policy:
            return
        self._rejected = ""
        self.policy = policy
        log.info("fault policy %s re-read: %d rule(s)", self.path, len(policy.rules))
        self._on_change()
