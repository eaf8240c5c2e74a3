"""scripts/cluster's bad options: one line naming what is wrong, exit 1, before anything is built, started
or deployed (each case stops while the options are read)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["built", "--kubernetes"], "--kubernetes needs a value: 1.37 or 1.34"),
        (["built", "--kubernetes", "1.33"], "--kubernetes 1.33: not a release this script knows (1.37 or 1.34)"),
        (["built", "--version"], "built: unknown argument '--version' (--kubernetes 1.37|1.34)"),
        (["built", "--kubernetes", "1.34", "--mode", "dra"], "built: unknown argument '--mode'"),
        (["build", "--kubernetes=1.37", "now"], "build: unknown argument 'now'"),
        (["check", "--kubernetes="], "--kubernetes : not a release this script knows (1.37 or 1.34)"),
        (["up", "--kubernetes"], "--kubernetes needs a value: 1.37 or 1.34"),
        (["up", "--feature-gates"], "--feature-gates needs a value: NAME=BOOL,..."),
        (["up", "--mode"], "--mode needs a value: dra, device-plugin or both"),
        (["up", "--fake-profile"], "--fake-profile needs a value: a profile name"),
        (["up", "--env", "NOEQUALS"], "--env NOEQUALS: not NAME=VALUE"),
        (["up", "--nodes", "2"], "up: unknown argument '--nodes'"),
        (["deploy", "--mode"], "--mode needs a value: dra, device-plugin or both"),
        (["deploy", "--mode", "gpu"], "--mode gpu: not a mode (dra, device-plugin or both)"),
        (["deploy", "--fake-profile"], "--fake-profile needs a value: a profile name"),
        (["bring-up"], "usage: scripts/cluster up"),
    ],
)
def test_a_bad_option_stops_with_one_line_naming_it(args: list[str], says: str) -> None:
    ran = subprocess.run(
        ["bash", str(REPO / "scripts" / "cluster"), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 1, ran
    [line] = ran.stderr.splitlines()
    assert line.startswith(f"cluster: {says}"), line
