"""Pure parsers for the network facts hccn_tool and npu-smi print about a die: its RoCE address,
its network health, and its super-pod identity.

Formats (mind-cluster devmanager/hccn/hccn_tool.go, npu-smi's print_npu_spod_info):
- `hccn_tool -i <phy> -ip -g`: `ipaddr:192.168.100.101` and `netmask:255.255.255.0`, on one line or two;
- `hccn_tool -i <phy> -net_health -g`: `net health status: Success` (`Init`, `Fault`, `Unreachable`...);
- `npu-smi info -t spod-info -i <card> -c <chip>` (Atlas A3): `Super Pod ID : 7`, `Server Index : 3`
  lines among others.
"""

from __future__ import annotations

import re

from npu_plugin.ascend.device import LinkState, parse_device_ip

_IPADDR = re.compile(r"ipaddr\s*:\s*(\S+)", re.IGNORECASE)
_NET_HEALTH_LINE = re.compile(r"net health status\s*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_SPOD_FIELD = re.compile(r"^\s*(Super Pod ID|Server Index|Chassis ID)\s*:\s*([0-9]+)\s*$", re.MULTILINE)


def parse_hccn_ip(text: str) -> str | None:
    """The address `hccn_tool -ip -g` prints; None when it prints none (or the unspecified one)."""
    match = _IPADDR.search(text)
    if match is None:
        return None
    try:
        return parse_device_ip(match.group(1))
    except ValueError:
        return None


# hccn_tool's words for dcmi_rdfx_detect_result, the check DCMI's dcmi_get_device_network_health
# answers (abi.link_from_network_health reads the numbers the same way).
_NET_HEALTH = {
    "success": LinkState.UP,
    "init": LinkState.UP,
    "socket fail": LinkState.DOWN,
    "receive timeout": LinkState.DOWN,
    "unreachable": LinkState.DOWN,
    "time exceeded": LinkState.DOWN,
    "fault": LinkState.DOWN,
}


def parse_net_health(text: str) -> LinkState:
    """`net health status: <word>` as a link state; a word that says nothing about the link (no
    detection address set, a detection thread error) or no such line is UNKNOWN."""
    match = _NET_HEALTH_LINE.search(text)
    if match is None:
        return LinkState.UNKNOWN
    return _NET_HEALTH.get(match.group(1).strip().lower(), LinkState.UNKNOWN)


def parse_spod_info(text: str) -> tuple[int | None, int | None, int | None]:
    """(super pod id, server index, rack id) from `npu-smi info -t spod-info`; a field it does not
    print is None (the rack is the `Chassis ID` of super pods that print one)."""
    found = {name: int(value) for name, value in _SPOD_FIELD.findall(text)}
    return found.get("Super Pod ID"), found.get("Server Index"), found.get("Chassis ID")
