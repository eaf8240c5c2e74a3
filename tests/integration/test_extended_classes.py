"""KEP-5004's rule, against the real daemon: a DeviceClass that maps (`extendedResourceName`) a name
this node's device plugin also advertises is told once per class, counted, and watched rather than
polled; without credentials device-plugin mode asks the API nothing."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import Awaitable, Callable
from typing import Any

from tests.support.both import RESOURCE, both_args, node, registered
from tests.support.daemon import DaemonProcess, Launcher
from tests.support.dra import Workspace, async_wait_until
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"
METRICS = ("--metrics-port", "0", "--bind-address", "127.0.0.1")


def a_class(name: str, resource: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": 'device.driver == "npu.huawei.com"'}}]}
    if resource is not None:
        spec["extendedResourceName"] = resource
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def conflicts(daemon: DaemonProcess) -> dict[str, float]:
    """`npu_plugin_extended_resource_conflicts` by device_class, scraped from the daemon."""
    found = re.search(r"metrics listening on (http://127\.0\.0\.1:\d+/metrics)", daemon.log())
    if found is None:
        return {}
    with urllib.request.urlopen(found.group(1), timeout=5) as answer:
        text = answer.read().decode()
    pattern = r'^npu_plugin_extended_resource_conflicts\{device_class="([^"]+)",resource="[^"]+"\} (\S+)$'
    return {m.group(1): float(m.group(2)) for m in re.finditer(pattern, text, re.M)}


def warnings(daemon: DaemonProcess) -> list[str]:
    return [line for line in daemon.log().splitlines() if "which this node's device plugin also advertises" in line]


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())


def test_a_class_mapping_an_advertised_name_is_told_once_counted_and_watched(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.set_kubernetes_version(36)
    fake_api.put_object("DeviceClass", a_class("ascend910.extended.npu.huawei.com", "huawei.com/Ascend910"))
    fake_api.put_object("DeviceClass", a_class("npu.huawei.com", None))
    fake_api.put_object("DeviceClass", a_class("ascend310p.extended.npu.huawei.com", "huawei.com/Ascend310P"))

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            daemon = launch_daemon(*both_args(workspace), *METRICS)
            await registered(sim, daemon)
            await async_wait_until(lambda: len(warnings(daemon)) == 1, what="the warning")
            (line,) = warnings(daemon)
            assert "DeviceClass ascend910.extended.npu.huawei.com maps huawei.com/Ascend910" in line
            assert "move the node to --mode dra" in line
            await async_wait_until(
                lambda: conflicts(daemon) == {"ascend910.extended.npu.huawei.com": 1.0}, what="the metric"
            )
            # A second class mapping the name is told too, the first not again.
            fake_api.put_object("DeviceClass", a_class("second", "huawei.com/Ascend910"))
            await async_wait_until(lambda: len(warnings(daemon)) == 2, what="the second warning")
            assert "DeviceClass second maps huawei.com/Ascend910" in warnings(daemon)[1]
            fake_api.delete_object("DeviceClass", "second")
            fake_api.delete_object("DeviceClass", "ascend910.extended.npu.huawei.com")
            await async_wait_until(lambda: conflicts(daemon) == {}, what="the metric cleared")
            assert len(warnings(daemon)) == 2
            asked = [f"{r.verb} {r.path}" for r in fake_api.requests if r.path == CLASSES]
            assert asked[0] == f"list {CLASSES}" and set(asked[1:]) == {f"watch {CLASSES}"}, asked

    run(scenario)


def test_device_plugin_mode_without_credentials_asks_the_api_nothing(
    workspace: Workspace, fake_api: FakeKubeAPI, launch_daemon: Launcher
) -> None:
    fake_api.put_object("DeviceClass", a_class("ascend910.extended.npu.huawei.com", "huawei.com/Ascend910"))

    async def scenario() -> None:
        async with node(workspace, fake_api) as sim:
            args = both_args(workspace)
            args[args.index("both")] = "device-plugin"
            kubeconfig = args.index("--kubeconfig")
            del args[kubeconfig : kubeconfig + 2]
            daemon = launch_daemon(*args)
            await async_wait_until(lambda: RESOURCE in sim.kubelet.plugins and sim.listed(), what="device plugin list")
            await asyncio.to_thread(daemon.wait_for_log, "no Kubernetes credentials")
        assert not [r for r in fake_api.requests if r.path == CLASSES]

    run(scenario)
