"""The `npu-plugin plan` sub-command: connect, read the cluster (`plan/read.py`), plan (pure), print.

Only list and get requests are made; nothing is written, not even as a dry run.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from npu_plugin.errors import ConfigError
from npu_plugin.kubeapi.client import KubeClient, connect
from npu_plugin.plan.planner import UnknownNodeError, make_plan
from npu_plugin.plan.read import NoClusterError, read_snapshot
from npu_plugin.plan.render import render

DEFAULT_KUBECONFIG = Path("~/.kube/config")
EXIT_READY, EXIT_NOT_READY = 0, 1  # 2 (usage, no cluster) comes from main's ConfigError


def run_plan(kubeconfig: Path | None, driver: str, target: str, nodes: tuple[str, ...], output: str) -> int:
    """Print the plan; its exit code (0 every node can move now, 1 not). ConfigError (exit 2) when
    there is no cluster to read or a --node it does not have."""
    if kubeconfig is None and (default := DEFAULT_KUBECONFIG.expanduser()).is_file():
        kubeconfig = default  # as kubectl: the user's kubeconfig first, the pod's account without one
    client = KubeClient(connect(kubeconfig, os.environ))
    try:
        snapshot = read_snapshot(client, driver)
    except NoClusterError as error:
        raise ConfigError(str(error)) from None
    finally:
        client.close()
    try:
        plan = make_plan(snapshot, target, nodes)
    except UnknownNodeError as error:
        raise ConfigError(f"--node: {error}") from None
    sys.stdout.write(render(plan, output))
    return EXIT_READY if plan.ready else EXIT_NOT_READY
