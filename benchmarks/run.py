"""scripts/bench: every benchmark, one table, one JSON file. Benchmarks never fail the build: a
missed target is marked in the table and the JSON, and the exit code stays 0 (it is 1 only when a
benchmark could not run at all)."""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from benchmarks import (
    bench,
    bench_api_cost,
    bench_both,
    bench_dra,
    bench_e2e,
    bench_fleet,
    bench_health_pass,
    bench_idle,
    bench_plan,
    bench_scale,
    bench_shares,
    bench_vnpu,
)
from benchmarks.common import FULL, QUICK, Budget
from benchmarks.report import render
from tests.support.cleanup import Interrupted, interruptible

# (title, module, key in the results): each module has run(results, budget) and rows(results[key]).
SECTIONS: list[tuple[str, ModuleType, str]] = [
    ("device-plugin mode", bench, "device_plugin"),
    ("DRA mode", bench_dra, "dra"),
    ("both mode (health propagation with --health-interval 0.2)", bench_both, "both"),
    ("scale: 1,024 fake devices", bench_scale, "scale"),
    ("idle: every mode at rest, default settings", bench_idle, "idle"),
    ("one health pass per backend", bench_health_pass, "health_pass"),
    ("vNPU: --vnpu dynamic on 16 dies", bench_vnpu, "vnpu"),
    ("shared NPUs: share vs whole-NPU Prepare, 16 chips x 100 shares", bench_shares, "shares"),
    ("plan: 5,000 nodes, 40,000 NPU pods", bench_plan, "plan"),
    ("API cost: --claim-status and health taints on Kubernetes 1.37", bench_api_cost, "api_cost"),
]


def environment(budget: Budget) -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "budget": budget.__dict__,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "bytecode": "compiled ahead, as in the image",
    }


def compile_package() -> None:
    """Every daemon started by the benchmarks runs from bytecode, as one installed from the image's
    wheel does (pip compiles at install): a source checkout may have none (PYTHONDONTWRITEBYTECODE),
    and a daemon compiling its modules at each start would be charged CPU time and memory no node
    pays. The files go where Python looks for them (`__pycache__` beside each module, ignored by
    git); the rest of the interpreter's modules have theirs."""
    package = Path(__file__).resolve().parent.parent / "npu_plugin"
    if not compileall.compile_dir(package, quiet=1):
        raise RuntimeError(f"could not compile {package}")


def measure_all(
    budget: Budget, say: Callable[[str], None], sections: list[tuple[str, ModuleType, str]] = SECTIONS
) -> dict[str, Any]:
    results: dict[str, Any] = {"environment": environment(budget)}
    for title, module, _key in sections:
        say(f"bench: {title} ...")
        started = time.monotonic()
        module.run(results, budget)
        say(f"bench: {title} done in {time.monotonic() - started:.0f} s")
    return results


def say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def fleet_size(text: str) -> int:
    try:
        size = int(text)
    except ValueError:
        size = 0
    if size < 1:
        raise argparse.ArgumentTypeError(f"--fleet takes a number of nodes (1 or more), got {text!r}")
    return size


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__)
    parser.add_argument("--json", type=Path, default=Path("bench-results.json"), help="where to write the results")
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds: a rough table, sooner")
    parser.add_argument(
        "--fleet",
        type=fleet_size,
        nargs="?",
        const=50,
        metavar="N",
        help="only the fleet benchmark: N DRA daemons (default 50) sharing one fake API server",
    )
    parser.add_argument(
        "--e2e",
        choices=bench_e2e.RELEASES,
        nargs="?",
        const=bench_e2e.RELEASES[0],
        metavar="RELEASE",
        help="only pod start on a real cluster of scripts/cluster (Kubernetes 1.37 by default, or 1.34); needs root",
    )
    parser.add_argument(
        "--section",
        action="append",
        choices=[key for _title, _module, key in SECTIONS],
        help="only this section (repeat for more); every section by default",
    )
    args = parser.parse_args(argv)
    if args.fleet is not None and args.section:
        parser.error("--fleet runs only the fleet: it takes no --section")
    if args.e2e is not None and (args.section or args.fleet is not None):
        parser.error("--e2e runs only pod start on a real cluster: it takes no --section or --fleet")
    try:
        # The cluster's daemons are scripts/cluster's, stopped by its down: not orphans for this process to reap.
        with interruptible(subreaper=args.e2e is None):
            return benchmark(args)
    except Interrupted as interrupted:
        say(f"bench: stopped by {interrupted}; every process it started is stopped and its directories removed")
        interrupted.exit()
    except bench_e2e.UnavailableError as unavailable:
        say(f"bench: {unavailable}")
        return 1


def benchmark(args: argparse.Namespace) -> int:
    budget = QUICK if args.quick else FULL
    results: dict[str, Any]
    if args.e2e is not None:
        bench_e2e.preflight(args.e2e)
        results = {"environment": environment(budget)}
        say(f"bench: pod start on a real cluster (Kubernetes {args.e2e}) ...")
        bench_e2e.run(results, budget, args.e2e)
        sections = [
            (
                f"pod start on a real node: Kubernetes {args.e2e}, --mode both, --vnpu dynamic",
                bench_e2e.rows(results["e2e"]),
            )
        ]
    elif args.fleet is None:
        compile_package()
        chosen = [section for section in SECTIONS if not args.section or section[2] in args.section]
        results = measure_all(budget, say, chosen)
        sections = [(title, module.rows(results[key])) for title, module, key in chosen]
    else:
        compile_package()
        results = {"environment": environment(budget)}
        say(f"bench: fleet of {args.fleet} ...")
        bench_fleet.run(results, budget, args.fleet)
        sections = [(f"fleet: {args.fleet} DRA nodes, one fake API server", bench_fleet.rows(results["fleet"]))]
    print(render(sections))
    results["missed"] = [f"{title}: {row.metric}" for title, rows in sections for row in rows if row.met is False]
    args.json.write_text(json.dumps(results, indent=2) + "\n")
    print(f"results written to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
