"""What the suite takes away from the host's environment, so that it runs alike on any machine:
the variables the daemon and the CLI would read as flags (a developer's KUBECONFIG, a DaemonSet's
NODE_NAME), and those that say it runs in a pod."""

from __future__ import annotations

import os
from typing import Any

from npu_plugin.cli.flags import build_parser

# Read where no flag is given: with them, the daemon thinks it runs in a pod and has API credentials.
IN_CLUSTER = ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")


class _Asked(dict[str, str]):
    """An empty environment that remembers every name looked up in it."""

    def __init__(self) -> None:
        super().__init__()
        self.names: set[str] = set()

    def __contains__(self, name: object) -> bool:
        self.names.add(str(name))
        return False

    def get(self, name: str, default: Any = None) -> Any:
        self.names.add(name)
        return default


def flag_variables() -> set[str]:
    """Every environment variable a flag of `npu-plugin` reads: its twin and its aliases, as the
    parser looks them up."""
    asked = _Asked()
    build_parser(asked)
    return asked.names


def clear_host_environment() -> None:
    for name in sorted(flag_variables()) + list(IN_CLUSTER):
        os.environ.pop(name, None)
