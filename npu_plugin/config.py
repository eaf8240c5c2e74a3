"""The daemon's configuration as values: the enums, `Config` and the checks on them (`BackendOptions`, where
devices come from, lives beside the backends in `backends/options.py`).

Flags are declared in `cli/main.py`; this module knows nothing about argparse beyond the value checkers,
which raise `argparse.ArgumentTypeError` saying what is allowed.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from npu_plugin.ascend.container_edits import Injection
from npu_plugin.ascend.device import DEFAULT_DRIVER
from npu_plugin.ascend.vnpu import TEMPLATE_NAME, VnpuMode
from npu_plugin.backends.options import BackendOptions
from npu_plugin.errors import ConfigError

E = TypeVar("E", bound=StrEnum)


class Mode(StrEnum):
    """Which kubelet APIs the daemon serves."""

    DEVICE_PLUGIN = "device-plugin"
    DRA = "dra"
    BOTH = "both"

    @property
    def serves_device_plugin(self) -> bool:
        return self is not Mode.DRA

    @property
    def serves_dra(self) -> bool:
        return self is not Mode.DEVICE_PLUGIN


class UnhealthyPolicy(StrEnum):
    """What a ResourceSlice does with an unhealthy device: leave it out, or keep it with a NoSchedule taint."""

    REMOVE = "remove"
    TAINT = "taint"


DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$")


# Value checkers: raise argparse.ArgumentTypeError with what is allowed.
def matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """An argparse type that accepts values of `pattern` (at most 253 characters), naming `what` otherwise."""

    def check(value: str) -> str:
        if len(value) > 253 or not pattern.match(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

    return check


MIN_KUBERNETES_MINOR = 34


def one_of(kind: type[E], normalize: Callable[[str], str] = str) -> Callable[[str], E]:
    """An argparse type for a StrEnum, naming the allowed values when `value` is none of them."""

    def check(value: str) -> E:
        try:
            return kind(normalize(value))
        except ValueError:
            allowed = ", ".join(member.value for member in kind)
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {allowed}") from None

    return check


def kubernetes_minor(value: str) -> int:
    """An argparse type for a Kubernetes version `1.Y` this plugin serves (1.34 or later): the minor, Y."""
    match = re.fullmatch(r"v?1\.([1-9][0-9]*)", value.strip())
    if match is None or int(match.group(1)) < MIN_KUBERNETES_MINOR:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Kubernetes version 1.{MIN_KUBERNETES_MINOR} or later, like 1.35"
        )
    return int(match.group(1))


def among(values: Sequence[str], normalize: Callable[[str], str] = str) -> Callable[[str], str]:
    """An argparse type for a fixed set of words, naming them when `value` is none of them."""

    def check(value: str) -> str:
        if normalize(value) not in values:
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(values)}")
        return normalize(value)

    return check


def _number(kind: Callable[[str], Any], low: float, high: float | None, what: str) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if number < low or (high is not None and number > high) or math.isnan(number):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return check


def address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)") from None
    return value


def non_empty(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def resource_name_or_auto(value: str) -> str:
    return value if value == "auto" else resource_name(value)


def template_names(value: str) -> frozenset[str]:
    """`--vnpu-templates`: a comma list of driver template names (`vir05_1c_16g,vir10_3c_32g`)."""
    names = [name.strip() for name in value.split(",")]
    for name in names:
        if not TEMPLATE_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a vNPU template name like vir05_1c_16g (a comma list of them)"
            )
    return frozenset(names)


dns_subdomain = matching(DNS_SUBDOMAIN, "a DNS subdomain (lower-case letters, digits, '-' and '.')")
resource_name = matching(RESOURCE_NAME, "an extended resource name like huawei.com/Ascend910, or auto")
safe_name = matching(_SAFE_NAME, "made of letters, digits, '-', '_' and '.' (it becomes part of a file name)")
port = _number(int, -1, 65535, "a port number from 0 to 65535, or -1 for off")
positive_seconds = _number(float, 0.01, 86400, "a number of seconds from 0.01 to 86400")
threshold = _number(int, 1, 1000, "a whole number from 1 to 1000")


def check_vnpu_mode(mode: Mode, vnpu: VnpuMode) -> None:
    """--vnpu dynamic creates vNPUs at Prepare, which only DRA has; ConfigError otherwise."""
    if vnpu is VnpuMode.DYNAMIC and mode is Mode.DEVICE_PLUGIN:
        raise ConfigError(
            "--vnpu dynamic needs DRA (--mode dra or both); --mode device-plugin serves existing vNPUs only "
            "(--vnpu static)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Config:
    """A validated `serve` configuration; every field has the default its flag has."""

    mode: Mode = Mode.DEVICE_PLUGIN
    node_name: str | None = None
    backend: BackendOptions = field(default_factory=BackendOptions)
    health_interval: float = 5.0
    health_failure_threshold: int = 2
    health_recovery_threshold: int = 3
    resource_name: str = "auto"
    device_plugin_path: Path = Path("/var/lib/kubelet/device-plugins")
    driver_name: str = DEFAULT_DRIVER
    device_profile: str = "npu"
    kubelet_registrar_directory_path: Path = Path("/var/lib/kubelet/plugins_registry")
    kubelet_plugins_directory_path: Path = Path("/var/lib/kubelet/plugins")
    cdi_root: Path = Path("/var/run/cdi")
    state_dir: Path | None = None
    kubeconfig: Path | None = None
    pod_uid: str | None = None
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    dra_devices: str | None = None
    device_injection: Injection = Injection.NODES
    mount_driver: bool = False
    cdi_enabled: bool = False
    unhealthy_policy: UnhealthyPolicy = UnhealthyPolicy.REMOVE
    healthcheck_port: int = -1
    metrics_port: int = -1
    bind_address: str = "0.0.0.0"
    log_level: str = "info"
    log_format: str = "text"
    vnpu: VnpuMode = VnpuMode.OFF
    vnpu_templates: frozenset[str] | None = None  # None: every template the chips offer

    def __post_init__(self) -> None:
        """Cross-flag checks the parser cannot do alone; ConfigError names the flag."""
        check_vnpu_mode(self.mode, self.vnpu)
        if self.vnpu_templates is not None and self.vnpu is not VnpuMode.DYNAMIC:
            raise ConfigError(
                f"--vnpu-templates chooses what --vnpu dynamic creates; it is unused with --vnpu {self.vnpu}"
            )
        if self.mode.serves_dra and not self.node_name:
            raise ConfigError(f"--node-name (or NODE_NAME) is required with --mode {self.mode}")
        if self.mode is Mode.BOTH and not self.dra_devices:
            raise ConfigError("--dra-devices is required with --mode both (e.g. 4-7 or ring-1)")

    @property
    def serves_device_plugin(self) -> bool:
        return self.mode.serves_device_plugin

    @property
    def serves_dra(self) -> bool:
        return self.mode.serves_dra

    @property
    def dev_root(self) -> Path:
        return self.backend.dev_root

    @property
    def fake_vnpu_state(self) -> Path | None:
        return self.backend.fake_vnpu_state

    @property
    def dra_state_dir(self) -> Path:
        """--state-dir, or <plugins dir>/<driver> when not given."""
        return self.state_dir or self.kubelet_plugins_directory_path / self.driver_name


def check_paths(config: Config) -> None:
    """Every directory flag the enabled modes use must be a directory where it already exists, and a
    kubeconfig given must be a file."""
    if config.serves_dra and config.kubeconfig is not None and not config.kubeconfig.is_file():
        problem = "is not a file" if config.kubeconfig.exists() else "no such file"
        raise ConfigError(f"--kubeconfig {config.kubeconfig}: {problem}")
    flags = {"dev-root": config.dev_root}
    if config.serves_device_plugin:
        flags["device-plugin-path"] = config.device_plugin_path
    if config.serves_dra:
        flags |= {
            "kubelet-registrar-directory-path": config.kubelet_registrar_directory_path,
            "kubelet-plugins-directory-path": config.kubelet_plugins_directory_path,
            "state-dir": config.dra_state_dir,
        }
    if config.serves_dra or config.cdi_enabled:
        flags["cdi-root"] = config.cdi_root
    for flag, path in flags.items():
        for ancestor in (path, *path.parents):
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise ConfigError(f"--{flag} {path}: {ancestor} exists and is not a directory")
                break
