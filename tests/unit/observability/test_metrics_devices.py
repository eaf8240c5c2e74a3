"""The device series: unhealthy devices by reason, devices with a RoCE port but no device IP."""

from __future__ import annotations

from dataclasses import replace

from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import DeviceView, Reason, Snapshot
from npu_plugin.observability.metrics import Metrics
from tests.support.fake_devices import profile_devices


def test_devices_without_ip_count_only_roce_devices() -> None:
    metrics = Metrics()
    assert metrics.registry.get_sample_value("npu_plugin_devices_without_ip") == 0
    a2 = profile_devices("atlas-800t-a2")
    a2[2], a2[5] = replace(a2[2], device_ip=None), replace(a2[5], device_ip=None)
    duo = profile_devices("atlas-300i-duo")  # no RoCE port, no IP expected
    views = tuple(
        DeviceView(d, True, Owner.DRA) for d in [*a2, *(replace(d, physical_id=8 + i) for i, d in enumerate(duo))]
    )

    metrics.record_devices(Snapshot(1, views))

    assert metrics.registry.get_sample_value("npu_plugin_devices_without_ip") == 2


def test_unhealthy_devices_by_reason() -> None:
    metrics = Metrics()
    assert {
        r: metrics.registry.get_sample_value("npu_plugin_unhealthy_devices", {"reason": r.value}) for r in Reason
    } == (dict.fromkeys(Reason, 0))
    a2 = profile_devices("atlas-800t-a2")
    reasons = {1: Reason.LINK_DOWN, 2: Reason.LINK_DOWN, 4: Reason.HEALTH, 6: Reason.GONE}
    views = tuple(DeviceView(d, d.physical_id not in reasons, Owner.DRA, reason=reasons.get(d.physical_id)) for d in a2)

    metrics.record_devices(Snapshot(1, views))

    counts = {r: metrics.registry.get_sample_value("npu_plugin_unhealthy_devices", {"reason": r.value}) for r in Reason}
    assert counts == {Reason.HEALTH: 1, Reason.LINK_DOWN: 2, Reason.GONE: 1}
