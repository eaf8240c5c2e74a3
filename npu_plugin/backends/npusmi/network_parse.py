"""Pure parsers for the network facts hccn_tool and npu-smi print about a die: its RoCE address,
link state and network health, and its super-pod identity.

Formats (mind-cluster devmanager/hccn/hccn_tool.go, npu-smi's print_npu_spod_info):
- `hccn_tool -i <phy> -ip -g`: `ipaddr:192.168.100.101` and `netmask:255.255.255.0`, on one line or two;
- `hccn_tool -i <phy> -link -g`: `link status: UP` (or `DOWN`);
- `hccn_tool -i <phy> -net_health -g`: `net health status: Success` (`Init`, `Fault`, `Unreachable`...);
- `npu-smi info -t spod-info -i <card> -c <chip>` (Atlas A3): `Super Pod ID : 7`, `Server Index : 3`
  lines among others.
"""

from __future__ import annotations

import re
from enum import StrEnum

from npu_plugin.ascend.device import parse_device_ip

_IPADDR = re.compile(r"ipaddr\s*:\s*(\S+)", re.IGNORECASE)
_LINK = re.compile(r"link status\s*:\s*(\S+)", re.IGNORECASE)
_NET_HEALTH = re.compile(r"net health status\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_SPOD_FIELD = re.compile(r"^\s*(Super Pod ID|Server Index|Chassis ID)\s*:\s*([0-9]+)\s*$", re.MULTILINE)


class LinkState(StrEnum):
    """What a die's RoCE link reads: UP, DOWN, or UNKNOWN when the query fails or says nothing
    usable."""

    UP = "UP"
    DOWN = "DOWN"
    UNKNOWN = "UNKNOWN"


def parse_hccn_ip(text: str) -> str | None:
    """The address `hccn_tool -ip -g` prints; None when it prints none (or the unspecified one)."""
    match = _IPADDR.search(text)
    if match is None:
        return None
    try:
        return parse_device_ip(match.group(1))
    except ValueError:
        return None


def parse_link_state(text: str) -> LinkState:
    """`link status: UP|DOWN`; anything else is UNKNOWN."""
    match = _LINK.search(text)
    word = match.group(1).upper() if match else ""
    return LinkState(word) if word in (LinkState.UP, LinkState.DOWN) else LinkState.UNKNOWN


# hccn_tool's words for dcmi_rdfx_detect_result; Success and Init count as up, as mind-cluster reads
# them (a link that is still being detected is no fault yet).
_NET_HEALTH_UP = frozenset({"success", "init"})


def parse_net_health(text: str) -> LinkState:
    """`net health status: <word>` as a link state: Success/Init UP, any other word DOWN, no such
    line UNKNOWN."""
    match = _NET_HEALTH.search(text)
    if match is None:
        return LinkState.UNKNOWN
    return LinkState.UP if match.group(1).strip().lower() in _NET_HEALTH_UP else LinkState.DOWN


def parse_spod_info(text: str) -> tuple[int | None, int | None, int | None]:
    """(super pod id, server index, rack id) from `npu-smi info -t spod-info`; a field it does not
    print is None (the rack is the `Chassis ID` of super pods that print one)."""
    found = {name: int(value) for name, value in _SPOD_FIELD.findall(text)}
    return found.get("Super Pod ID"), found.get("Server Index"), found.get("Chassis ID")
