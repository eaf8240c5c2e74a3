"""Logging: one line per event, as text for people or JSON with stable keys for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Context keys a log call may pass with `extra=`; JSON lines always carry them when given.
CONTEXT_KEYS = ("device", "claim", "pod", "error")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        for key in CONTEXT_KEYS:
            if (value := getattr(record, key, None)) is not None:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None and "error" not in line:
            line["error"] = repr(record.exc_info[1])
        return json.dumps(line, separators=(",", ":"), default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        context = " ".join(
            f"{key}={getattr(record, key)}" for key in CONTEXT_KEYS if getattr(record, key, None) is not None
        )
        return f"{text} [{context}]" if context else text


def setup_logging(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Library chatter (watchdog's inotify events, urllib3 connection pool) is not our event stream.
    for noisy in ("watchdog", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
