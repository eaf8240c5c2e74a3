"""What device-plugin mode loads with default settings: the real daemon, run with Python's `-X
importtime` against the kubelet simulator, registers, lists, answers an Allocate and stops; the
modules it imported on the way are read from that output. Parts only other modes or flags need load
where they are used, so they must not appear here (each one costs idle memory on every node)."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

from npu_plugin._proto import deviceplugin_v1beta1_pb2 as pb
from npu_plugin.sim.kubelet import KubeletSimulator
from tests.support.daemon import Launcher

RESOURCE = "huawei.com/Ascend910"
# What needs each module that device-plugin mode must not load (a package stands for everything
# under it).
NOT_LOADED = {
    "yaml": "an inventory file (--fake-inventory), DRA (kubeconfig files)",
    "ruamel": "npu-plugin migrate",
    "kubernetes": "DRA",
    "prometheus_client": "--metrics-port",
    "difflib": "a misspelled flag",
    "npu_plugin.dra": "DRA",
    "npu_plugin.kubeapi.client": "DRA",
    "npu_plugin.kubeapi.kubeconfig": "DRA",
    "npu_plugin.kubeapi.connection": "DRA",
    "urllib3": "DRA",
    "npu_plugin.handover.workflow": "dra and both modes, a kubelet's PodResources socket",
    "npu_plugin.handover.podresources": "dra and both modes, --pod-annotations, a kubelet's PodResources socket",
    "npu_plugin.inventory.vnpu_plans": "--vnpu static|dynamic",
    "npu_plugin.deviceplugin.vnpu_service": "a vNPU resource (--vnpu static|dynamic)",
    "npu_plugin.backends.fake.vnpu_hardware": "the fake backend's first vNPU call",
    "npu_plugin.backends.fake.inventory_file": "an inventory file (--fake-inventory)",
    "npu_plugin.cdi.files": "--cdi-enabled",
    "npu_plugin.observability.metrics": "--metrics-port",
    "npu_plugin.observability.healthcheck": "--healthcheck-port",
    "npu_plugin.cli.migrate": "npu-plugin migrate",
    "npu_plugin.migrate.transform": "npu-plugin migrate",
    "npu_plugin.cli.inventory": "npu-plugin inventory",
    "npu_plugin.sim": "npu-plugin simulate",
}


def imported_modules(log: str) -> set[str]:
    """Module names from `-X importtime` lines: `import time: <self> | <cumulative> |
    <indent><name>`."""
    return {line.rsplit("|", 1)[1].strip() for line in log.splitlines() if line.startswith("import time:")}


def loaded(modules: set[str], name: str) -> list[str]:
    return sorted(m for m in modules if m == name or m.startswith(name + "."))


def test_device_plugin_mode_at_rest_loads_only_what_it_serves(
    short_dir: Path, dev_root: Path, launch_daemon: Launcher
) -> None:
    plugin_dir = short_dir / "dp"
    plugin_dir.mkdir()

    async def serve_one_allocate() -> None:
        kubelet = KubeletSimulator(plugin_dir)
        await kubelet.start()
        try:
            daemon = launch_daemon(
                "--mode",
                "device-plugin",
                "--backend",
                "fake",
                "--fake-profile",
                "atlas-800t-a2",
                "--dev-root",
                str(dev_root),
                "--device-plugin-path",
                str(plugin_dir),
                python_args=("-X", "importtime"),
            )
            await kubelet.wait_until(
                lambda: RESOURCE in kubelet.plugins and kubelet.plugins[RESOURCE].updates > 0, 30, "a device list"
            )
            request = pb.ContainerAllocateRequest(devices_ids=["Ascend910-0", "Ascend910-1"])
            response = await kubelet.plugins[RESOURCE].stub.Allocate(pb.AllocateRequest(container_requests=[request]))
            assert response.container_responses[0].envs["ASCEND_VISIBLE_DEVICES"] == "0,1"
            code, _ = await asyncio.to_thread(daemon.signal, signal.SIGTERM, 15)
            assert code == 0, daemon.log()
        finally:
            await kubelet.stop()
        modules = imported_modules(daemon.log())
        assert "npu_plugin.deviceplugin.service" in modules, "the daemon's -X importtime output was not read"
        unexpected = {name: loaded(modules, name) for name in NOT_LOADED if loaded(modules, name)}
        assert not unexpected, "\n".join(
            f"loaded {', '.join(m)}: only {NOT_LOADED[n]} needs it" for n, m in unexpected.items()
        )

    asyncio.run(asyncio.wait_for(serve_one_allocate(), 90))
