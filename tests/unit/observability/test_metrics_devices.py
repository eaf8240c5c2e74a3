"""The device series: devices with a RoCE port but no device IP."""

from __future__ import annotations

from dataclasses import replace

from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import DeviceView, Snapshot
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
