"""What the suite takes away from the host, so that it runs alike on any machine: the variables the
daemon and the CLI would read as flags (a developer's KUBECONFIG, a DaemonSet's NODE_NAME), those
that say it runs in a pod, and the driver's hccn_tool, which the npu-smi backend finds by itself."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from npu_plugin.cli.flags import build_parser
from tests.support import cleanup

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


# Answers as hccn_tool does for a device it does not know.
NO_DEVICE_HCCN_TOOL = """#!/bin/sh
echo "hccn_tool: device $2: no such device" >&2
exit 1
"""


@contextlib.contextmanager
def no_host_hccn_tool() -> Iterator[None]:
    """An hccn_tool that knows no device first on PATH for the block: a backend given none finds it
    before the host's (on PATH, or the driver's tools), so device IPs are unknown on every host."""
    with cleanup.temporary_directory("npu-tools-") as tools:
        stub = tools / "hccn_tool"
        stub.write_text(NO_DEVICE_HCCN_TOOL, encoding="utf-8")
        stub.chmod(0o755)
        path = os.environ.get("PATH", "")
        os.environ["PATH"] = f"{tools}{os.pathsep}{path}"
        try:
            yield
        finally:
            os.environ["PATH"] = path
