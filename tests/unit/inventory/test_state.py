"""Inventory: health hysteresis, device-node presence, re-discovery and the coalescing change
feed."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from npu_plugin.ascend.device import Health
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import HealthTracker, Inventory, Snapshot
from tests.support.fake_devices import profile_devices

OK, BAD = True, False


@pytest.mark.parametrize(
    ("failures", "recoveries", "start", "samples", "verdicts"),
    [
        (2, 3, OK, [BAD], [OK]),
        (2, 3, OK, [BAD, BAD], [OK, BAD]),
        (2, 3, OK, [BAD, OK, BAD], [OK, OK, OK]),  # a good sample resets the streak
        (1, 1, OK, [BAD, OK], [BAD, OK]),
        (2, 3, OK, [BAD, BAD, OK, OK, OK], [OK, BAD, BAD, BAD, OK]),
        (2, 3, OK, [BAD, BAD, OK, OK, BAD, OK, OK, OK], [OK, BAD, BAD, BAD, BAD, BAD, BAD, OK]),
        (2, 3, BAD, [OK, OK, OK], [BAD, BAD, OK]),  # a device discovered unhealthy can recover
        (3, 1, OK, [BAD, BAD, BAD, OK], [OK, OK, BAD, OK]),
    ],
)
def test_hysteresis(failures: int, recoveries: int, start: bool, samples: list[bool], verdicts: list[bool]) -> None:
    tracker = HealthTracker(failures, recoveries, start)
    assert [tracker.observe(s) for s in samples] == verdicts


def test_forced_unhealthy_needs_a_full_recovery_streak() -> None:
    tracker = HealthTracker(2, 3, OK)
    tracker.observe(OK)
    tracker.force_unhealthy()
    assert [tracker.observe(OK) for _ in range(3)] == [BAD, BAD, OK]


def inventory(failures: int = 2, recoveries: int = 2) -> Inventory:
    return Inventory(profile_devices("atlas-800t-a2"), failure_threshold=failures, recovery_threshold=recoveries)


def levels(**overrides: Health) -> dict[int, Health]:
    sample = dict.fromkeys(range(8), Health.OK)
    sample.update({int(k.removeprefix("d")): v for k, v in overrides.items()})
    return sample


def healthy(snapshot: Snapshot) -> dict[int, bool]:
    return {v.physical_id: v.healthy for v in snapshot.devices}


def test_health_follows_the_thresholds() -> None:
    inv = inventory(failures=2, recoveries=2)
    inv.observe(levels(d3=Health.CRITICAL))
    assert healthy(inv.snapshot())[3]
    assert inv.snapshot().get(3).device.health is Health.CRITICAL  # type: ignore[union-attr]
    inv.observe(levels(d3=Health.CRITICAL))
    assert not healthy(inv.snapshot())[3]
    inv.observe(levels())
    inv.observe(levels())
    assert healthy(inv.snapshot())[3]


def test_warning_is_healthy_and_a_missing_sample_reads_unknown() -> None:
    inv = inventory(failures=1)
    inv.observe({i: Health.WARNING for i in range(7)})
    assert healthy(inv.snapshot()) == {**dict.fromkeys(range(7), True), 7: False}
    assert inv.snapshot().get(7).device.health is Health.UNKNOWN  # type: ignore[union-attr]


def test_a_vanished_device_node_is_unhealthy_at_once_and_recovers_after_it_returns() -> None:
    inv = inventory(recoveries=2)
    inv.set_present(2, False)
    assert not healthy(inv.snapshot())[2]
    inv.observe(levels())
    inv.observe(levels())
    assert not healthy(inv.snapshot())[2], "the node is still missing"
    inv.set_present(2, True)
    inv.observe(levels())
    assert not healthy(inv.snapshot())[2]
    inv.observe(levels())
    assert healthy(inv.snapshot())[2]


def test_presence_of_an_unknown_device_is_ignored() -> None:
    inv = inventory()
    version = inv.snapshot().version
    inv.set_present(42, False)
    assert inv.snapshot().version == version


def test_update_devices_refreshes_adds_and_keeps_vanished_ones_unhealthy() -> None:
    inv = inventory()
    devices = profile_devices("atlas-800t-a2")
    fresh = [replace(d, driver_version="25.0") for d in devices[1:]]
    extra = replace(devices[0], physical_id=8, logic_id=8, card_id=8)
    inv.update_devices([*fresh, extra])
    snapshot = inv.snapshot()
    assert [v.physical_id for v in snapshot.devices] == list(range(9))
    assert not healthy(snapshot)[0]
    assert healthy(snapshot)[8]
    assert snapshot.get(1).device.driver_version == "25.0"  # type: ignore[union-attr]
    inv.update_devices(devices)
    assert not healthy(inv.snapshot())[0], "a returning device still needs healthy samples"
    inv.observe(levels())
    inv.observe(levels())
    assert healthy(inv.snapshot())[0]


def test_owners_and_owned_by() -> None:
    inv = Inventory(
        profile_devices("atlas-800t-a2"), failure_threshold=1, recovery_threshold=1, owners={4: Owner.DRA, 5: Owner.DRA}
    )
    assert [v.physical_id for v in inv.snapshot().owned_by(Owner.DRA)] == [4, 5]
    inv.set_owner(4, Owner.DEVICE_PLUGIN)
    assert [v.physical_id for v in inv.snapshot().owned_by(Owner.DRA)] == [5]


def test_an_unchanged_sample_publishes_nothing() -> None:
    inv = inventory()
    version = inv.snapshot().version
    inv.observe(levels())
    assert inv.snapshot().version == version


def test_watch_yields_at_once_then_coalesces_changes() -> None:
    async def scenario() -> list[tuple[int, dict[int, bool]]]:
        inv = inventory(failures=1)
        seen: list[tuple[int, dict[int, bool]]] = []
        feed = inv.watch()
        first = await anext(feed)
        seen.append((first.version, healthy(first)))
        inv.observe(levels(d1=Health.CRITICAL))
        inv.observe(levels(d1=Health.CRITICAL, d2=Health.CRITICAL))
        latest = await anext(feed)
        seen.append((latest.version, healthy(latest)))
        waiting = asyncio.ensure_future(anext(feed))
        await asyncio.sleep(0)
        assert not waiting.done(), "no change, no snapshot"
        inv.set_present(5, False)
        seen.append(((s := await waiting).version, healthy(s)))
        await feed.aclose()
        return seen

    seen = asyncio.run(scenario())
    assert [v for v, _ in seen] == [0, 2, 3]
    assert not seen[1][1][1] and not seen[1][1][2]
    assert not seen[2][1][5]


def test_every_watcher_sees_the_latest_change() -> None:
    async def scenario() -> list[bool]:
        inv = inventory(failures=1)
        feeds = [inv.watch() for _ in range(3)]
        for feed in feeds:
            await anext(feed)
        inv.observe(levels(d6=Health.ALARM))
        results = [healthy(await anext(feed))[6] for feed in feeds]
        for feed in feeds:
            await feed.aclose()
        return results

    assert asyncio.run(scenario()) == [False, False, False]


def test_a_device_found_after_start_gets_the_rule_s_owner_and_is_not_draining() -> None:
    devices = profile_devices("atlas-800t-a2")
    owners = {d.physical_id: Owner.DRA for d in devices}
    inv = Inventory(
        devices,
        failure_threshold=1,
        recovery_threshold=1,
        owners=owners,
        desired=owners,
        new_device_owner=lambda device: Owner.DRA if device.physical_id % 2 == 0 else Owner.DEVICE_PLUGIN,
    )
    inv.update_devices([*devices, replace(devices[0], physical_id=8), replace(devices[0], physical_id=9)])
    snapshot = inv.snapshot()
    assert [(v.physical_id, v.owner, v.draining) for v in snapshot.devices[8:]] == [
        (8, Owner.DRA, False),
        (9, Owner.DEVICE_PLUGIN, False),
    ]
    assert inv.desired_owners()[8] is Owner.DRA and inv.desired_owners()[9] is Owner.DEVICE_PLUGIN


C, W, G, A = Health.CRITICAL, Health.WARNING, Health.OK, Health.ALARM  # G: good


@pytest.mark.parametrize(
    ("samples", "shown"),
    [
        # The level a slice shows moves with the verdict: a sample that does not move it changes nothing.
        ([C, C, G, C, G, G, G], [G, C, C, C, C, C, G]),
        ([C, G, C, G], [G, G, G, G]),  # flapping below the threshold: nothing to publish
        ([W, G, W], [W, G, W]),  # healthy to healthy is no verdict change: shown at once
        ([C, C, A], [G, C, A]),  # unhealthy to unhealthy: shown at once
    ],
)
def test_the_published_level_is_the_one_the_verdict_stands_for(samples: list[Health], shown: list[Health]) -> None:
    inv = inventory(failures=2, recoveries=3)
    seen = []
    for level in samples:
        inv.observe(levels(d3=level), {3: (0x80E01801,)} if not level.healthy else {})
        view = inv.snapshot().get(3)
        assert view is not None
        seen.append(view.published.health)
        assert view.published.faults == ((0x80E01801,) if not view.level.healthy else ())
    assert seen == shown


def test_a_vanished_device_publishes_unknown_without_faults() -> None:
    inv = inventory(failures=1)
    inv.observe(levels(d3=Health.CRITICAL), {3: (7,)})
    inv.set_present(3, False)
    view = inv.snapshot().get(3)
    assert view is not None and (view.level, view.faults, view.healthy) == (Health.UNKNOWN, (), False)
