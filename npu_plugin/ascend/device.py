"""The Device record, health levels and the id forms the two APIs use."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

# The DRA driver name (`--driver-name`): the ResourceSlices' driver, the CDI vendor, the plugin
# directory.
DEFAULT_DRIVER = "npu.huawei.com"


class Health(StrEnum):
    """Backend health levels (DCMI 0, 1, 2, 3, 0xFFFFFFFF; npu-smi prints the same words)."""

    OK = "OK"
    WARNING = "Warning"
    ALARM = "Alarm"
    CRITICAL = "Critical"
    UNKNOWN = "Unknown"

    @property
    def healthy(self) -> bool:
        return self in (Health.OK, Health.WARNING)

    @classmethod
    def parse(cls, word: str) -> Health:
        """Case-insensitive: npu-smi prints `UNKNOWN`, the inventory file `Unknown`."""
        for level in cls:
            if level.value.lower() == word.strip().lower():
                return level
        allowed = ", ".join(level.value for level in cls)
        raise ValueError(f"unknown health {word!r} (allowed: {allowed})")


class LinkState(StrEnum):
    """A die's RoCE link as the backend reads it (DCMI network health, `hccn_tool -link -g`, the
    fake inventory's `linkStatus`); UNKNOWN when the query fails or says nothing usable."""

    UP = "UP"
    DOWN = "DOWN"
    UNKNOWN = "UNKNOWN"


FAULT_CODE_MAX = 0xFFFFFFFF  # DCMI fault codes are unsigned 32-bit words, e.g. 0x80E01801


def parse_fault_code(value: object) -> int:
    """A fault code from a number or a hex string (`80E01801`, `0x80E01801`, as npu-smi prints
    them); ValueError naming the value otherwise."""
    code = value
    if isinstance(value, str):
        try:
            code = int(value.strip().removeprefix("0x").removeprefix("0X"), 16)
        except ValueError:
            raise ValueError(f"{value!r} is not a fault code (hex digits)") from None
    if isinstance(code, bool) or not isinstance(code, int):
        raise ValueError(f"{value!r} is not a fault code")
    if not 0 <= code <= FAULT_CODE_MAX:
        raise ValueError(f"code {value} is out of range (0 to 0xFFFFFFFF)")
    return code


DEVICE_TYPES = ("Ascend910", "Ascend910B", "Ascend910C", "Ascend310P", "Ascend310")

_CHIP_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = (
    # Atlas A3: DSMI's `910_9392`, or the bare model number `9392` (9362 ... 9392) that some drivers put in
    # dcmi_get_device_chip_info_v2's npu_name.
    (re.compile(r"^(910_?93|910C|93\d\d$)", re.IGNORECASE), "Ascend910C"),
    (re.compile(r"^910B", re.IGNORECASE), "Ascend910B"),
    (re.compile(r"^910", re.IGNORECASE), "Ascend910"),
    (re.compile(r"^310P", re.IGNORECASE), "Ascend310P"),
    (re.compile(r"^310", re.IGNORECASE), "Ascend310"),
)


def device_type_for_chip(chip_name: str) -> str:
    """Family of a chip name as npu-smi prints it: `910B3` → Ascend910B, `910` → Ascend910."""
    name = chip_name.strip().removeprefix("Ascend").removeprefix("ascend")
    for pattern, family in _CHIP_FAMILIES:
        if pattern.match(name):
            return family
    raise ValueError(f"unknown Ascend chip name {chip_name!r}")


def has_roce(device_type: str) -> bool:
    """Whether the family's dies carry their own RoCE port (the 910 family: the device IP HCCL ranks
    reach each other by); 310 and 310P cards have none."""
    return device_type.startswith("Ascend910")


def without_ip(devices: Iterable[Device]) -> list[int]:
    """Pure: physical ids, ascending, of the devices that have a RoCE port but no device IP."""
    return sorted(d.physical_id for d in devices if has_roce(d.device_type) and d.device_ip is None)


def parse_device_ip(value: object) -> str:
    """An NPU's RoCE address in its canonical text (`192.168.100.101`, `fd00::1`); ValueError for
    anything else, the unspecified address (`0.0.0.0`: the port has none) included."""
    if not isinstance(value, str):
        raise ValueError(f"expected an IPv4 or IPv6 address as a string, got {value!r}")
    try:
        address = ipaddress.ip_address(value.strip())
    except ValueError:
        raise ValueError(f"expected an IPv4 or IPv6 address, got {value!r}") from None
    if address.is_unspecified:
        raise ValueError(f"{value!r} is the unspecified address, not a device IP")
    return str(address)


def id_prefix(device_type: str) -> str:
    """Prefix of Device Plugin ids: the whole 910 family shares the official plugin's
    `Ascend910`."""
    return "Ascend910" if device_type.startswith("Ascend910") else device_type


def resource_name_for(device_type: str) -> str:
    return f"huawei.com/{id_prefix(device_type)}"


def dra_name(physical_id: int) -> str:
    """DRA device name in the ResourceSlice: `npu-3`."""
    return f"npu-{physical_id}"


@dataclass(frozen=True, slots=True)
class Device:
    """One NPU die the kernel exposes as /dev/davinci<physical_id>.

    The four id spaces (physical, logic, card, chip) differ on real hosts; never assume one from
    another.
    """

    physical_id: int
    chip_name: str
    device_type: str
    logic_id: int
    card_id: int
    chip_id: int = 0
    memory: int = 0
    ai_core: int | None = None
    numa_node: int | None = None
    pci_bus_id: str | None = None
    topology_group: str = ""
    driver_version: str | None = None
    health: Health = Health.OK
    pcie_root: str | None = None  # e.g. `pci0000:00`, from sysfs; not part of the inventory file
    faults: tuple[int, ...] = ()  # fault codes the backend reported with the health level, ascending
    # Network identity (MindCluster's rank-table inputs): the die's RoCE address, and on super-pod
    # hardware (Atlas A3) its super pod, its server's index in it and the rack; None where absent.
    device_ip: str | None = None
    super_pod_id: int | None = None
    server_index: int | None = None
    rack_id: int | None = None
    # The RoCE link: the last sample in the inventory's record; in a published record DOWN only
    # while the link has been down for --link-down-timeout (the device's reason to be unhealthy).
    link: LinkState = LinkState.UP

    @property
    def dp_id(self) -> str:
        """Device Plugin id, the official plugin's form: `Ascend910-3`."""
        return f"{id_prefix(self.device_type)}-{self.physical_id}"

    @property
    def dra_name(self) -> str:
        return dra_name(self.physical_id)

    @property
    def device_node(self) -> str:
        return device_node(self.physical_id)


# Only the exact form we print: `\d` and `$` would also take `npu-03`, `npu-٣` or `npu-3\n`, other
# names for device 3 that a checkpoint compares as different strings, so one device could go to two
# claims.
_ID = "(0|[1-9][0-9]{0,5})"
_DP_ID = re.compile(f"(Ascend910|Ascend310P|Ascend310)-{_ID}")
_DRA_NAME = re.compile(f"npu-{_ID}")
_DEVICE_NODE = re.compile("davinci([0-9]{1,6})")
VNPU_NODE_PREFIX = "vdavinci"


def device_node(physical_id: int) -> str:
    """A whole NPU's node under /dev: `davinci3`, in the host and in the container."""
    return f"davinci{physical_id}"


def vnpu_node(vnpu_id: int) -> str:
    """A vNPU's node under the host's /dev: `vdavinci<id>`; the container sees it as
    `device_node(id)`."""
    return f"{VNPU_NODE_PREFIX}{vnpu_id}"


def parse_device_node(name: str) -> int | None:
    """`davinci3` → 3; None for any other name under /dev (`davinci_manager`, `vdavinci100`)."""
    match = _DEVICE_NODE.fullmatch(name)
    return int(match.group(1)) if match else None


def parse_dp_id(device_id: str) -> tuple[str, int] | None:
    """`Ascend910-3` → ("Ascend910", 3); None when the id is not of our form."""
    match = _DP_ID.fullmatch(device_id)
    return (match.group(1), int(match.group(2))) if match else None


def parse_dra_name(name: str) -> int | None:
    """`npu-3` → 3; None when the name is not of our form."""
    match = _DRA_NAME.fullmatch(name)
    return int(match.group(1)) if match else None


def device_key(physical_ids: Iterable[int]) -> str:
    """The `device` value: DRA device names in both modes, so one query finds a device's every
    line."""
    return ",".join(dra_name(physical_id) for physical_id in sorted(physical_ids))
