"""dra/partitionable.py: when the gate is probed, what the probe looks like, and what counts as
counters lost."""

from __future__ import annotations

from typing import Any

import pytest

from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.partitionable import PROBE_SECONDS, PartitionableGate, lost_counters, probe_counters
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.vnpu_slices import Layout
from npu_plugin.kubeapi.protocol import ResourceSlice, StoredSlice
from tests.support.kube_fake import InMemoryKube

SETTINGS = SliceSettings("npu.huawei.com", "n1", "uid", UnhealthyPolicy.REMOVE)
CONSUMES = [{"counterSet": "npu-0-counters", "counters": {"aicore": {"value": "5"}}}]


class Versioned(InMemoryKube):
    """The test double, at a chosen version; its dry run keeps or drops counters as the gate
    says."""

    def __init__(self, minor: int, gate: bool) -> None:
        super().__init__()
        self.minor, self.gate = minor, gate

    def server_version(self) -> tuple[int, int]:
        super().server_version()
        return (1, self.minor)

    def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
        answer = super().create_slice(body, dry_run=dry_run)
        if dry_run and self.gate:
            answer["spec"] = body["spec"]
        return answer


def test_the_probe_is_a_counter_only_slice_in_a_pool_of_its_own() -> None:
    probe = probe_counters(SETTINGS)
    assert probe["metadata"] == {"generateName": "n1-npu.huawei.com-probe-"}
    assert probe["spec"] == {
        "driver": "npu.huawei.com",
        "nodeName": "n1",
        "pool": {"name": "n1-probe", "generation": 1, "resourceSliceCount": 1},
        "sharedCounters": [{"name": "probe", "counters": {"probe": {"value": "1"}}}],
    }


def test_the_gate_is_probed_at_start_every_ten_minutes_and_after_a_version_change() -> None:
    now = [0.0]
    api = Versioned(35, gate=True)
    gate = PartitionableGate(api, clock=lambda: now[0])
    assert gate.layout is Layout.FALLBACK  # fail closed until the first probe
    assert gate.refresh(SETTINGS) is True
    assert (gate.layout, api.calls["create_slice"]) == (Layout.SPLIT, 1)
    now[0] = PROBE_SECONDS - 1
    assert gate.refresh(SETTINGS) is False
    assert api.calls["create_slice"] == 1
    api.gate, now[0] = False, PROBE_SECONDS
    assert gate.refresh(SETTINGS) is True
    assert (gate.layout, api.calls["create_slice"]) == (Layout.FALLBACK, 2)
    api.minor, api.gate = 34, True
    assert gate.refresh(SETTINGS) is True
    assert (gate.layout, api.calls["create_slice"]) == (Layout.COMBINED, 3)
    assert api.calls["server_version"] == 4
    assert api.slices() == []  # dry runs store nothing


def test_a_probe_the_server_stored_is_deleted_at_once() -> None:
    class NoDryRun(Versioned):
        def create_slice(self, body: ResourceSlice, *, dry_run: bool = False) -> StoredSlice:
            return InMemoryKube.create_slice(self, body)

    api = NoDryRun(35, gate=True)
    PartitionableGate(api).refresh(SETTINGS)
    assert api.calls["delete_slice"] == 1
    assert api.slices() == []


def test_one_warning_names_the_gate_however_often_it_is_found_off(caplog: pytest.LogCaptureFixture) -> None:
    gate = PartitionableGate(Versioned(35, gate=False), clock=lambda: 0.0)
    gate.refresh(SETTINGS)
    gate.stripped()
    gate.stripped()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1
    assert "DRAPartitionableDevices is off on the API server" in warnings[0]
    assert "kube-apiserver and kube-scheduler" in warnings[0]


def _slice(spec: dict[str, Any]) -> Any:
    return {"metadata": {"name": "s"}, "spec": spec}


@pytest.mark.parametrize(
    ("written", "stored", "lost"),
    [
        ({"sharedCounters": [{"name": "a"}]}, {}, True),
        ({"sharedCounters": [{"name": "a"}]}, {"sharedCounters": [{"name": "a"}]}, False),
        ({"devices": [{"name": "d", "consumesCounters": CONSUMES}]}, {"devices": [{"name": "d"}]}, True),
        (
            {"devices": [{"name": "d", "consumesCounters": CONSUMES}]},
            {"devices": [{"name": "d", "consumesCounters": CONSUMES}]},
            False,
        ),
        ({"devices": [{"name": "d"}]}, {"devices": [{"name": "d"}]}, False),
        ({"devices": []}, {"devices": []}, False),
    ],
)
def test_lost_counters(written: dict[str, Any], stored: dict[str, Any], lost: bool) -> None:
    assert lost_counters(_slice(written), _slice(stored)) is lost
