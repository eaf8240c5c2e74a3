"""scripts/bench --e2e: the rows judge each kind's p50 and p90 against the floor and the plugin's share of
a pod's start; a machine that cannot bring up the cluster gets one line and a non-zero exit."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from benchmarks.bench_e2e import KINDS, TARGETS, Sample, rows, summary

REPO = Path(__file__).resolve().parents[2]


def samples(kind: str, starts: list[float], plugin: float) -> list[Sample]:
    return [Sample(kind, start, 0.0 if kind == "floor" else plugin) for start in starts]


def test_rows_judge_each_kind_against_the_floor_and_the_plugins_share() -> None:
    # Ten pods of each kind: p50 is the 5th start, p90 the 9th.
    measured = summary(
        samples("floor", [1.0] * 8 + [2.0] * 2, 0.0)
        + samples("device-plugin", [1.2] * 8 + [2.4] * 2, 0.005)
        + samples("dra", [1.4] * 8 + [2.0] * 2, 0.01)
        + samples("vnpu", [1.4] * 8 + [3.2] * 2, 0.2)
    )
    assert (measured["floor"]["p50_s"], measured["floor"]["p90_s"]) == (1.0, 2.0)
    assert (measured["dra"]["p50_ratio"], measured["dra"]["p90_ratio"]) == (1.4, 1.0)
    assert measured["vnpu"]["plugin_share_p90_pct"] == pytest.approx(14.29)
    section = {
        "results": {"load_1m_before": 0.1, "load_1m_after": 0.2, "kubernetes": "v1.37.2", "wall_s": 60.0, **measured},
        "targets": TARGETS,
    }
    verdicts = {row.metric: row.verdict for row in rows(section) if row.met is not None}
    assert verdicts == {
        "device-plugin pod p50": "met",
        "device-plugin pod p90": "met",
        "device-plugin pod: plugin's share": "met",
        "DRA claim pod p50": "MISSED",
        "DRA claim pod p90": "met",
        "DRA claim pod: plugin's share": "met",
        "dynamic vNPU pod p50": "met",
        "dynamic vNPU pod p90": "MISSED",
        "dynamic vNPU pod: plugin's share": "MISSED",
    }
    assert set(measured) == set(KINDS)


def bench_e2e(tmp_path: Path, *prefix: str) -> subprocess.CompletedProcess[str]:
    # An empty build cache: the cluster cannot come up without a build.
    env = dict(os.environ, NPU_CLUSTER_CACHE=str(tmp_path / "cache"))
    argv = [*prefix, str(REPO / ".venv" / "bin" / "python"), "-m", "benchmarks.run", "--e2e"]
    argv += ["--json", str(tmp_path / "r.json")]
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_without_the_cluster_built_it_says_so_in_one_line(tmp_path: Path) -> None:
    run = bench_e2e(tmp_path)
    assert run.returncode == 1
    expected = "--e2e needs the local cluster built: etcd" if os.geteuid() == 0 else "--e2e needs root"
    assert run.stderr.startswith(f"bench: {expected}") and run.stderr.count("\n") == 1, run.stderr
    assert not (tmp_path / "r.json").exists()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to drop to nobody")
def test_without_root_it_says_so_in_one_line(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    run = bench_e2e(tmp_path, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups")
    assert run.returncode == 1
    assert run.stderr == "bench: --e2e needs root: it brings up a real cluster (scripts/cluster up)\n"
