"""A DaemonSet written for MindCluster's device plugin: every one of its flags is named in one
message with what npu-plugin does instead, nothing is swallowed as a short option, and the table in
docs/mindcluster.md is the one in code.

To regenerate the docs table after changing npu_plugin/cli/mindcluster.py:
NPU_PLUGIN_UPDATE_GOLDEN=1 pytest tests/unit/cli/test_mindcluster_flags.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npu_plugin.cli.flagparser import FlagParser
from npu_plugin.cli.flags import build_parser
from npu_plugin.cli.main import parse_args
from npu_plugin.cli.mindcluster import FLAGS, MindClusterFlag

DOC = Path(__file__).resolve().parents[3] / "docs" / "mindcluster.md"
BEGIN = "<!-- mindcluster-flags: generated from npu_plugin/cli/mindcluster.py -->\n"
END = "<!-- /mindcluster-flags -->\n"
_FLAG = re.compile(r"`(--[a-z][a-z-]*[a-z])[ `]")  # a flag of ours, in a code span


def render(flags: tuple[MindClusterFlag, ...]) -> str:
    """The docs table: one row per flag, spelled as MindCluster's documentation spells it."""
    rows = ["| MindCluster flag | Go type | MindCluster default | npu-plugin instead |", "| --- | --- | --- | --- |"]
    for flag in flags:
        name = f"--{flag.name}" if "-" in flag.name else f"-{flag.name}"
        default = f"`{flag.default}`" if flag.default else '`""`'
        instead = flag.instead.replace("|", "\\|")  # a code span's | still ends a table cell
        rows.append(f"| `{name}` | {flag.kind} | {default} | {instead} |")
    return "\n".join(rows) + "\n"


def test_the_docs_table_is_generated_from_the_code() -> None:
    text = DOC.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    if os.environ.get("NPU_PLUGIN_UPDATE_GOLDEN"):
        DOC.write_text(text[:start] + render(FLAGS) + text[end:], encoding="utf-8")
    else:
        assert text[start:end] == render(FLAGS)


def test_the_table_is_sorted_unique_and_names_only_flags_serve_has() -> None:
    names = [flag.name for flag in FLAGS]
    assert names == sorted(set(names), key=str.lower)
    parser = build_parser({})
    ours = {*parser.subcommands["serve"].flags, "--version"}
    named = {found for flag in FLAGS for found in _FLAG.findall(flag.instead)}
    assert named - ours == set()
    assert [flag.name for flag in FLAGS if ";" in flag.instead] == []  # "; " separates them in the message


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line `parse_args` exits 2 with."""
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, {})
    captured = capsys.readouterr()
    assert (exited.value.code, captured.out, captured.err.count("\n")) == (2, "", 1), captured
    return captured.err.removesuffix("\n")


def _given(flag: MindClusterFlag) -> str:
    """The flag as a MindCluster DaemonSet passes it."""
    return f"-{flag.name}=true" if flag.kind == "bool" else f"-{flag.name}={flag.default or 'x'}"


@pytest.mark.parametrize("flag", FLAGS, ids=[flag.name for flag in FLAGS])
def test_each_flag_says_what_npu_plugin_does_instead(flag: MindClusterFlag, capsys: pytest.CaptureFixture[str]) -> None:
    assert refused([_given(flag)], capsys) == (
        f"npu-plugin serve: error: unrecognized argument -{flag.name}: a flag of MindCluster's device plugin "
        f"(docs/mindcluster.md), what npu-plugin does instead: -{flag.name}: {flag.advice}"
    )


def test_all_of_them_are_named_in_one_message(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["serve", "--backend", "fake", *map(_given, FLAGS)], capsys)
    names = ", ".join(f"-{flag.name}" for flag in FLAGS)
    assert err.startswith(f"npu-plugin serve: error: unrecognized arguments {names}: flags of MindCluster's ")
    for flag in FLAGS:
        assert f"-{flag.name}: {flag.advice}" in err


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["-hotReset=-1"],  # argparse alone reads it as -h with the argument "otReset=-1"
            "unrecognized argument -hotReset: a flag of MindCluster's device plugin",
        ),
        (["-hotReset", "-1"], "unrecognized argument -hotReset: a flag"),  # Go takes -1 as its value
        (["--logFile", "/var/log/dp.log", "-logLevel", "-1"], "unrecognized arguments --logFile, -logLevel: flags"),
        (["-useAscendDocker", "--mode", "dra"], "unrecognized argument -useAscendDocker: a flag"),  # a bool: no value
        (["-fooBar=1"], "unrecognized argument -fooBar (npu-plugin's flags start with --)"),
        (["-h2"], "unrecognized argument -h2 (npu-plugin's flags start with --)"),
        (["-health-interval=5"], "unrecognized argument -health-interval (did you mean --health-interval?)"),
        (["--log-l", "debug"], "unrecognized argument --log-l (did you mean --log-level?)"),  # no abbreviations
        (
            ["serve", "-volcanoType=true", "--health-intervl", "3", "-x"],
            "unrecognized arguments -volcanoType, --health-intervl (did you mean --health-interval?), -x (npu-plugin's "
            "flags start with --): a flag of "
            "MindCluster's device plugin (docs/mindcluster.md), what npu-plugin does instead: -volcanoType: ",
        ),
    ],
)
def test_one_dash_flags_are_never_read_as_short_options(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert refused(argv, capsys).startswith(f"npu-plugin serve: error: {expected}")


@pytest.mark.parametrize(
    ("argv", "attribute", "value"),
    [
        (["serve", "--healthcheck-port", "-1"], "healthcheck_port", -1),
        (["serve", "--healthcheck-port=-1"], "healthcheck_port", -1),
        (["serve", "--mode", "dra", "--node-name", "n"], "mode", "dra"),
        (["serve", "--log-level", "debug"], "log_level", "debug"),
        (["inventory", "-ojson"], "output", "json"),
        (["inventory", "-o", "yaml"], "output", "yaml"),
        (["inventory", "-o=table"], "output", "table"),
        (["migrate", "-fin.yaml"], "filename", "in.yaml"),
        (["migrate", "-f", "-"], "filename", "-"),
    ],
)
def test_our_own_flags_parse_as_before(argv: list[str], attribute: str, value: object) -> None:
    assert getattr(parse_args(argv, {}), attribute) == value


def test_the_command_exits_2_with_one_line(tmp_path: Path) -> None:
    """As a MindCluster DaemonSet's args run it: the image's entrypoint, no `serve`."""
    argv = [sys.executable, "-m", "npu_plugin", "-useAscendDocker=true", "-hotReset=-1", "-logFile", "/x.log"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False)
    assert (done.returncode, done.stdout, done.stderr.count("\n")) == (2, "", 1)
    assert done.stderr.startswith(
        "npu-plugin serve: error: unrecognized arguments -useAscendDocker, -hotReset, -logFile: "
    )


def test_help_is_still_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(["serve", "-h"], {})
    assert exited.value.code == 0 and "usage: npu-plugin serve" in capsys.readouterr().out


def small_parser() -> FlagParser:
    parser = FlagParser(prog="t", environ={})
    parser.add_argument("--name")
    parser.add_argument("--switch", action="store_true")
    parser.add_argument("--maybe", nargs="?", const="yes")
    parser.add_argument("-o", "--output")
    return parser


@pytest.mark.parametrize(
    ("argv", "unknown"),
    [
        (["--name", "-x"], []),  # the value of a flag of ours, whatever it looks like
        (["--switch", "-x"], ["-x"]),
        (["--maybe", "-x"], ["-x"]),  # an optional value is one only when it does not look like a flag
        (["--maybe", "v", "-x", "--maybe=-y"], ["-x"]),
        (["-ovalue", "-o=v", "-o", "-y", "--output", "z"], []),
        (["-hotReset=-1", "--also=1"], ["-hotReset", "--also"]),
        (["-logLevel", "-1", "-z"], ["-logLevel", "-z"]),  # a flag that takes a value: Go reads the next one
        (["-logLevel=1", "-z"], ["-logLevel", "-z"]),
        (["-useAscendDocker", "-z"], ["-useAscendDocker", "-z"]),  # one that does not
        (["-1", "-2.5", "-", "positional", "--", "-after"], []),
        (["--name"], []),
        (["-logLevel"], ["-logLevel"]),
    ],
)
def test_unknown_flags(argv: list[str], unknown: list[str]) -> None:
    found = small_parser().unknown_flags(argv, lambda name: name == "logLevel")
    assert [item.given for item in found] == unknown
    assert all(item.name == item.given.lstrip("-") for item in found)
