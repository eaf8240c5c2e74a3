"""DRAResourceHealth's reports: one message per device, refreshed only while samples are fresh."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from npu_plugin._proto import dra_health_v1_pb2, dra_health_v1alpha1_pb2
from npu_plugin.ascend.device import Health
from npu_plugin.dra.service import HealthFeed, ResourceHealthV1, health_message
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import DeviceView, Inventory, Reason
from tests.support.fake_devices import profile_devices

DEVICE = profile_devices("atlas-800t-a2")[0]


@pytest.mark.parametrize(
    ("level", "healthy", "message"),
    [
        (Health.OK, True, "910B3 health OK"),
        (Health.WARNING, True, "910B3 health Warning"),
        (Health.CRITICAL, False, "910B3 health Critical"),
        (Health.ALARM, True, "910B3 health Alarm, not yet past the failure threshold"),
        (Health.OK, False, "910B3 health OK, unhealthy until it recovers or its device node is back"),
    ],
)
def test_the_message_says_the_level_and_why_the_verdict_differs(level: Health, healthy: bool, message: str) -> None:
    view = DeviceView(replace(DEVICE, health=level), healthy, Owner.DRA)
    assert health_message(view) == message


def test_the_message_names_a_link_down() -> None:
    view = DeviceView(DEVICE, False, Owner.DRA, reason=Reason.LINK_DOWN)
    assert health_message(view) == "910B3 health OK, RoCE link down past --link-down-timeout"


def test_reports_repeat_only_while_samples_are_fresh() -> None:
    """The kubelet forgets a device's health `timeout` after the last report: the stream repeats
    the list every timeout/3, and stops repeating while the health poller is stuck, so the kubelet
    shows the devices Unknown rather than a stale Healthy. Through v1 only: both versions run the
    same NodeWatchResources, which takes 4 s of real time here (v1alpha1's stream, its messages and
    a change, is checked over the wire in tests/integration/test_dra_registration.py)."""
    servicer, pb = ResourceHealthV1, dra_health_v1_pb2

    async def scenario() -> None:
        inventory = Inventory([DEVICE], failure_threshold=1, recovery_threshold=1, owners=Owner.DRA)
        fresh = [True]
        feed = HealthFeed(inventory, "node-1", 3, lambda: fresh[0], asyncio.Event())
        stream = servicer(feed).NodeWatchResources(pb.NodeWatchResourcesRequest(), None)
        first = await anext(stream)
        assert isinstance(first, pb.NodeWatchResourcesResponse)
        (device,) = first.devices
        assert (device.device.device_name, device.health_check_timeout_seconds) == ("npu-0", 3)
        assert len((await anext(stream)).devices) == 1  # repeated after 1 s
        fresh[0] = False
        pending = asyncio.ensure_future(anext(stream))
        done, _ = await asyncio.wait({pending}, timeout=2.5)
        assert not done, "a stale inventory is not reported again"
        fresh[0] = True
        assert len((await pending).devices) == 1
        await stream.aclose()

    asyncio.run(scenario())


def test_the_health_names_advertised_are_the_grpc_service_names() -> None:
    """The kubelet calls `/<advertised name>/NodeWatchResources`: for DRAResourceHealth the
    advertised name must be the proto's full service name (k8s.io/kubelet's
    TestServiceNameConstants)."""
    for pb, advertised in (
        (dra_health_v1_pb2, "v1.DRAResourceHealth"),
        (dra_health_v1alpha1_pb2, "v1alpha1.DRAResourceHealth"),
    ):
        assert pb.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name == advertised
