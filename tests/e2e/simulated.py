"""(h, issue #22) What `npu-plugin simulate` shows for a mode, read from its report, to compare with what
the real cluster gave: the first device as the scheduler sees it and the claim's CDI spec (dra), and what
Allocate gives a container (device-plugin)."""

from __future__ import annotations

import json
import re
import subprocess
import textwrap
from typing import Any

import yaml

from tests.e2e.cluster import REPO

PROFILE = "atlas-800-9000"  # the profile scripts/cluster deploys by default


def simulate(mode: str) -> str:
    run = subprocess.run(
        [str(REPO / ".venv" / "bin" / "npu-plugin"), "simulate", "--mode", mode, "--fake-profile", PROFILE],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


def _block(report: str, start: str, end: str) -> str:
    """The lines after the one containing `start`, up to and including the first line equal to `end`
    (or up to the first blank line when `end` is empty), dedented."""
    lines = report.splitlines()
    first = next(i for i, line in enumerate(lines) if start in line) + 1
    taken: list[str] = []
    for line in lines[first:]:
        if not end and not line.strip():
            break
        taken.append(line)
        if end and line == end:
            break
    return textwrap.dedent("\n".join(taken))


def first_device(report: str) -> dict[str, Any]:
    """dra: the device simulate prints "as the scheduler sees it"."""
    device: dict[str, Any] = yaml.safe_load(_block(report, "first device as the scheduler sees it", ""))
    return device


def cdi_spec(report: str) -> dict[str, Any]:
    """dra: the claim's CDI spec NodePrepareResources wrote."""
    spec: dict[str, Any] = json.loads(_block(report, "-claim_", "    }"))
    return spec


def allocate(report: str) -> tuple[dict[str, str], set[str]]:
    """device-plugin: Allocate's environment and the container paths of its devices."""
    env = dict(re.findall(r"^\s+env\s+(\w+)=(\S*)$", report, re.MULTILINE))
    devices = set(re.findall(r"^\s+device\s+\S+ -> (\S+) \(", report, re.MULTILINE))
    return env, devices
