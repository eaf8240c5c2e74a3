"""--share-devices against the devices found, and the chips it may not share."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.vnpu import Vnpu
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.sharing import Sharing, check_not_split
from tests.support.fake_devices import profile_devices

DUO = profile_devices("atlas-300i-duo")  # four 310P3, card-0 and card-1


@pytest.mark.parametrize(
    ("text", "count", "shared", "every"),
    [
        (None, None, set(), False),
        ("", 8, set(), False),
        ("  ", 8, set(), False),
        ("all", 8, {0, 1, 2, 3}, True),
        ("ALL", None, {0, 1, 2, 3}, True),
        ("1-2", 5, {1, 2}, False),
        ("card-1", 5, {2, 3}, False),
    ],
)
def test_share_devices(text: str | None, count: int | None, shared: set[int], every: bool) -> None:
    sharing = Sharing.of(text, count, DUO)
    assert {i for i in range(6) if sharing.shared(i)} == (set(range(6)) if every else shared)
    assert sharing.enabled is bool(shared)
    assert sharing.shares(1) == (sharing.count if 1 in shared else 0)
    assert sharing.count == (count or 4)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("7", "--share-devices: no device with physical id [7] on this node"),
        ("1,1", "--share-devices: '1' repeats device(s) [1]"),
        ("3-1", "--share-devices: range '3-1' runs backwards"),
        ("gpu", "--share-devices: 'gpu' is neither an id"),
    ],
)
def test_a_bad_share_list_names_the_flag(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as raised:
        Sharing.of(text, 4, DUO)
    assert str(raised.value).startswith(problem)


def test_a_shared_chip_holding_vnpus_is_refused_naming_it() -> None:
    vnpus = {1: (Vnpu(1, 100, "vir02"),), 2: ()}
    check_not_split(Sharing.of("2-3", 4, DUO), vnpus)
    with pytest.raises(ConfigError, match=r"^--share-devices: npu-1 \(1 vNPU\(s\)\) hold\(s\) vNPUs; a shared chip"):
        check_not_split(Sharing.of("all", 4, DUO), vnpus)
