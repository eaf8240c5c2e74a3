"""Logging: one line per event, as text for people or JSON with stable keys for machines."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

# Context keys a log call may pass with `extra=`; both formats carry them when given.
CONTEXT_KEYS = ("device", "claim", "pod", "error")
# Facts of the start-up line: JSON carries them as keys, the text message already spells them out.
STARTUP_KEYS = ("version", "mode", "backend", "device_count")
# Everything str.splitlines() breaks on, so no reader can split one event into two lines.
_LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_CONTROLS = "".join(chr(code) for code in (*range(0x20), *range(0x7F, 0xA0)))  # C0, DEL, C1: NUL, ESC, ...


def _escapes(characters: str) -> dict[int, str]:
    return {ord(c): c.encode("unicode_escape").decode("ascii") for c in characters}


_ESCAPES = _escapes(_LINE_BREAKS)
_CONTROL_ESCAPES = _escapes(_LINE_BREAKS + _CONTROLS)


def one_line(text: str) -> str:
    """Escape line breaks (a traceback, an error quoting a file) so the event stays one line."""
    return text.translate(_ESCAPES)


def printable(text: str) -> str:
    """Escape line breaks as `one_line` does, and every other control character too: for text that
    leaves the process for another program (a per-claim error the kubelet logs and shows in
    events)."""
    return text.translate(_CONTROL_ESCAPES)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "event": record.getMessage(),
            "logger": record.name,
        }
        for key in (*CONTEXT_KEYS, *STARTUP_KEYS):
            if (value := getattr(record, key, None)) is not None:
                line[key] = value
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            line.setdefault("error", f"{type(error).__name__}: {error}")
            line["traceback"] = self.formatException(record.exc_info)
        # ensure_ascii escapes U+2028 and friends too: the line survives any reader.
        return json.dumps(line, separators=(",", ":"), default=str)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        message = record.getMessage()
        context = " ".join(
            f"{key}={value}"
            for key in CONTEXT_KEYS
            if (value := getattr(record, key, None)) is not None
            # The usual `log.warning("... failed: %s", error, extra={"error": str(error)})` says it once here;
            # JSON keeps the key for machines.
            and not (key == "error" and str(value) in message)
        )
        return one_line(f"{text} [{context}]" if context else text)


def skip_unused_record_fields() -> None:
    """Neither format shows the caller's file and line, the thread or the process, so LogRecords
    need not collect them: the logging HOWTO's "Optimization" settings, which take a third off every
    logged event (Allocate logs one)."""
    logging._srcfile = None  # documented there; there is no public setter
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def setup_logging(level: str, fmt: str) -> None:
    skip_unused_record_fields()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Python warnings are events too; unrouted they would print multi-line text into a JSON stream.
    logging.captureWarnings(True)
    # Library chatter (watchdog's inotify events, urllib3 connection pool) is not our event stream.
    for noisy in ("watchdog", "urllib3", "kubernetes"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
