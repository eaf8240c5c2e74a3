"""hccn_tool's and npu-smi's network answers, table-driven."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.device import LinkState
from npu_plugin.backends.npusmi.network_parse import (
    parse_hccn_ip,
    parse_net_health,
    parse_spod_info,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ipaddr:192.168.100.101\nnetmask:255.255.255.0\n", "192.168.100.101"),
        ("ipaddr:10.30.12.9 netmask:255.255.255.0", "10.30.12.9"),
        ("ipaddr : fd00:0::1\n", "fd00::1"),
        ("ipaddr:0.0.0.0\nnetmask:0.0.0.0\n", None),
        ("ipaddr:\nnetmask:\n", None),
        ("ipaddr:300.1.1.1\n", None),
        ("", None),
        ("Command execute failed.\n", None),
    ],
)
def test_parse_hccn_ip(text: str, expected: str | None) -> None:
    assert parse_hccn_ip(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("net health status: Success\n", LinkState.UP),
        ("net health status: Init\n", LinkState.UP),
        ("net health status: Fault\n", LinkState.DOWN),
        ("net health status: Receive timeout\n", LinkState.DOWN),
        ("net health status: Unreachable\n", LinkState.DOWN),
        ("net health status: Detect ip set\n", LinkState.UNKNOWN),  # no detection address: no evidence
        ("net health status: Thread error\n", LinkState.UNKNOWN),
        ("something else\n", LinkState.UNKNOWN),
    ],
)
def test_parse_net_health(text: str, expected: LinkState) -> None:
    assert parse_net_health(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "\tSDID                           : 8392704\n\tSuper Pod Size                 : 48\n"
            "\tSuper Pod ID                   : 7\n\tServer Index                   : 3\n",
            (7, 3, None),
        ),
        ("\tSuper Pod ID : 2\n\tChassis ID : 5\n\tSuper Pod Type : 1\n", (2, None, 5)),
        ("This device does not support get spod info.\n", (None, None, None)),
    ],
)
def test_parse_spod_info(text: str, expected: tuple[int | None, ...]) -> None:
    assert parse_spod_info(text) == expected
