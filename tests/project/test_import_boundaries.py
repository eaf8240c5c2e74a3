"""Device-plugin mode must never load the kubernetes client (memory, start-up time, attack
surface)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

BUILD_DP_DAEMON = textwrap.dedent("""
    import sys
    from npu_plugin.cli.main import config_from_args, parse_args
    from npu_plugin.backends.auto import discover, open_backend
    from npu_plugin.daemon import Daemon

    config = config_from_args(parse_args(
        ["serve", "--mode", "device-plugin", "--backend", "fake", "--fake-profile", "atlas-800t-a2"], {}))
    backend = open_backend(config.backend)
    Daemon(config, backend, discover(backend))
    print(",".join(sorted(m for m in sys.modules if m.split(".")[0] == "kubernetes")))
""")


def test_a_device_plugin_daemon_does_not_import_kubernetes() -> None:
    result = subprocess.run(
        [sys.executable, "-c", BUILD_DP_DAEMON], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "", f"kubernetes modules loaded: {result.stdout}"
