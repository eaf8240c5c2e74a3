"""Log formats: one line per event in text and JSON, stable JSON keys, structured context keys."""

from __future__ import annotations

import io
import json
import logging
import sys
import warnings
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from npu_plugin.ascend.device import Health, device_key
from npu_plugin.inventory.state import Inventory
from npu_plugin.logs import JsonFormatter, TextFormatter, one_line, setup_logging
from tests.support.fake_devices import profile_devices

MULTI_LINE = "first line\nsecond line\r\nthird\u2028fourth\x85fifth"


def emit(
    formatter: logging.Formatter,
    message: str,
    *args: object,
    level: int = logging.INFO,
    raised: BaseException | None = None,
    **extra: Any,
) -> str:
    """What one log call writes through `formatter` (raised: logged from inside its except
    block)."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter)
    logger = logging.getLogger("npu_plugin.test_logs")
    logger.handlers[:], logger.propagate = [handler], False
    logger.setLevel(logging.DEBUG)
    if raised is None:
        logger.log(level, message, *args, extra=extra)
    else:
        try:
            raise raised
        except type(raised):
            logger.log(level, message, *args, extra=extra, exc_info=True)
    return stream.getvalue()


def single_line(output: str) -> str:
    """The one line `output` holds: exactly one terminator, and nothing a reader would split on."""
    assert output.endswith("\n")
    assert len(output.splitlines()) == 1, output
    return output[:-1]


def json_line(output: str) -> dict[str, Any]:
    line: dict[str, Any] = json.loads(single_line(output))
    return line


# --- JSON ---


def test_json_line_has_the_stable_keys_and_only_the_context_given() -> None:
    line = json_line(emit(JsonFormatter(), "allocated devices %s", "Ascend910-3", device="npu-3"))
    assert list(line) == ["ts", "level", "event", "logger", "device"]
    assert line["event"] == "allocated devices Ascend910-3"
    assert (line["level"], line["logger"], line["device"]) == ("info", "npu_plugin.test_logs", "npu-3")
    assert line["ts"].endswith("+00:00") and "T" in line["ts"]


@pytest.mark.parametrize(
    ("level", "name"),
    [
        (logging.DEBUG, "debug"),
        (logging.INFO, "info"),
        (logging.WARNING, "warning"),
        (logging.ERROR, "error"),
        (logging.CRITICAL, "critical"),
    ],
)
def test_json_levels_are_lower_case(level: int, name: str) -> None:
    assert json_line(emit(JsonFormatter(), "x", level=level))["level"] == name


def test_json_carries_every_context_key_and_the_startup_facts() -> None:
    context: dict[str, Any] = {"device": "npu-0,npu-1", "claim": "team-a/train", "pod": "team-a/job-0", "error": "boom"}
    startup: dict[str, Any] = {"version": "0.1.0", "mode": "both", "backend": "fake", "device_count": 8}
    line = json_line(emit(JsonFormatter(), "x", **context, **startup))
    assert {k: line[k] for k in context} == context
    assert {k: line[k] for k in startup} == startup


def test_json_keeps_a_multi_line_message_on_one_line() -> None:
    assert json_line(emit(JsonFormatter(), "%s", MULTI_LINE))["event"] == MULTI_LINE


def test_json_exception_is_one_line_with_error_and_traceback() -> None:
    line = json_line(emit(JsonFormatter(), "task failed", level=logging.ERROR, raised=ValueError("bad\nvalue")))
    assert line["error"] == "ValueError: bad\nvalue"
    assert line["traceback"].startswith("Traceback (most recent call last):")
    assert "ValueError: bad" in line["traceback"]


def test_json_an_explicit_error_wins_over_the_exception_text() -> None:
    line = json_line(emit(JsonFormatter(), "x", raised=OSError("raw"), error="what the operator should read"))
    assert line["error"] == "what the operator should read"


def test_json_values_that_are_not_json_become_strings() -> None:
    assert json_line(emit(JsonFormatter(), "x", error=ValueError("v")))["error"] == "v"


# --- text ---


def test_text_line_appends_the_context_keys() -> None:
    line = single_line(emit(TextFormatter(), "prepared claim %s", "a/b", claim="a/b", device="npu-2"))
    assert line.endswith("INFO    npu_plugin.test_logs: prepared claim a/b [device=npu-2 claim=a/b]")


def test_text_line_without_context_has_no_brackets() -> None:
    assert single_line(emit(TextFormatter(), "plain")).endswith(": plain")


def test_text_escapes_line_breaks_in_the_message() -> None:
    line = single_line(emit(TextFormatter(), "%s", MULTI_LINE))
    assert line.endswith(r"first line\nsecond line\r\nthird\u2028fourth\x85fifth")


def test_text_exception_stays_on_one_line() -> None:
    line = single_line(emit(TextFormatter(), "task failed", level=logging.ERROR, raised=RuntimeError("boom")))
    assert r"task failed\nTraceback (most recent call last):\n" in line
    assert line.endswith(r"RuntimeError: boom")


def test_text_escapes_line_breaks_in_context_values() -> None:
    line = single_line(emit(TextFormatter(), "rejected", error="line 3:\n  bad field"))
    assert line.endswith(r"rejected [error=line 3:\n  bad field]")


def test_text_leaves_out_an_error_the_message_already_says() -> None:
    """`log.warning("x failed: %s", error, extra={"error": str(error)})` is the usual call: the text line says the
    error once, the JSON line keeps it as its `error` key."""
    error = "kubelet.sock does not exist yet"
    line = single_line(emit(TextFormatter(), "registration failed: %s", error, error=error, device="npu-1"))
    assert line.endswith(f"registration failed: {error} [device=npu-1]")
    assert json_line(emit(JsonFormatter(), "registration failed: %s", error, error=error))["error"] == error
    other = single_line(emit(TextFormatter(), "prepare failed", error="HTTP 403"))
    assert other.endswith("prepare failed [error=HTTP 403]")


def test_one_line_leaves_ordinary_text_alone() -> None:
    text = 'tab\there, quotes "x", back\\slash, 中文'
    assert one_line(text) == text


# --- structured values ---


def test_device_key_is_sorted_dra_names() -> None:
    assert device_key([3, 0, 12]) == "npu-0,npu-3,npu-12"
    assert device_key([]) == ""


def test_a_verdict_flip_is_one_line_with_the_device_key(caplog: pytest.LogCaptureFixture) -> None:
    devices = profile_devices("atlas-800t-a2")
    inventory = Inventory(devices, failure_threshold=1, recovery_threshold=1)
    levels = {d.physical_id: d.health for d in devices}
    caplog.set_level(logging.INFO, logger="npu_plugin.inventory.state")
    inventory.observe(levels | {5: Health.CRITICAL})
    inventory.observe(levels | {5: Health.CRITICAL})
    inventory.observe(levels)
    inventory.update_devices([replace(d, driver_version="25.0") for d in devices])
    flips = [(r.levelname, r.getMessage(), getattr(r, "device", None)) for r in caplog.records]
    assert flips == [
        ("WARNING", "device npu-5 turned unhealthy (last health sample: Critical)", "npu-5"),
        ("INFO", "device npu-5 is healthy again", "npu-5"),
    ]


def test_a_vanished_device_says_why_it_turned_unhealthy(caplog: pytest.LogCaptureFixture) -> None:
    """A device node gone or a device no longer discovered is no bad health sample: the line says what happened."""
    devices = profile_devices("atlas-800t-a2")
    inventory = Inventory(devices, failure_threshold=2, recovery_threshold=1)
    caplog.set_level(logging.WARNING, logger="npu_plugin.inventory")
    inventory.set_present(2, False)
    inventory.update_devices([d for d in devices if d.physical_id != 6])
    assert [r.getMessage() for r in caplog.records] == [
        "device npu-2 turned unhealthy (its device node is gone)",
        "device npu-6 turned unhealthy (no longer discovered)",
    ]


# --- setup_logging ---


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    record_fields = (logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing)
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.captureWarnings(False)
    logging._srcfile, logging.logThreads, logging.logProcesses, logging.logMultiprocessing = record_fields


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_json_writes_warnings_as_json_lines_on_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("info", "json")
    logging.getLogger("npu_plugin.somewhere").info("hello", extra={"device": "npu-1"})
    logging.getLogger("npu_plugin.somewhere").debug("below the level")
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn("a library\nwarning", UserWarning, stacklevel=1)
    print("flush", file=sys.stderr)
    lines = capsys.readouterr().err.splitlines()
    assert lines[-1] == "flush"
    events = [json.loads(line) for line in lines[:-1]]
    assert [(e["logger"], e["level"]) for e in events] == [("npu_plugin.somewhere", "info"), ("py.warnings", "warning")]
    assert "a library\nwarning" in events[1]["event"]


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_quietens_library_chatter_but_not_our_loggers() -> None:
    setup_logging("debug", "text")
    assert logging.getLogger("watchdog").getEffectiveLevel() == logging.WARNING
    assert logging.getLogger("npu_plugin.inventory.state").getEffectiveLevel() == logging.DEBUG


@pytest.mark.usefixtures("restore_logging")
def test_setup_logging_records_skip_the_fields_no_format_shows() -> None:
    setup_logging("info", "text")
    records: list[logging.LogRecord] = []
    logger = logging.getLogger("npu_plugin.somewhere")
    collect = logging.Handler()
    collect.emit = records.append  # type: ignore[method-assign]
    logger.addHandler(collect)
    try:
        logger.warning("allocated devices %s", "Ascend910-1", extra={"device": "npu-1"})
    finally:
        logger.removeHandler(collect)
    [record] = records
    assert (record.pathname, record.lineno, record.funcName) == ("(unknown file)", 0, "(unknown function)")
    assert (record.threadName, record.processName, record.process) == (None, None, None)
