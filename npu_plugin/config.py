"""Flags, their environment twins and validation: argparse in, one frozen Config out."""

from __future__ import annotations

import argparse
import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_plugin.edits import Injection
from npu_plugin.errors import ConfigError
from npu_plugin.profiles import PROFILES

MODES = ("device-plugin", "dra", "both")
BACKENDS = ("auto", "dcmi", "npu-smi", "fake")
# Flags whose environment twins are the names the seed manifests already use.
ENV_OVERRIDES = {"node-name": "NODE_NAME", "pod-uid": "POD_UID"}
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$")


def env_name(flag: str) -> str:
    return ENV_OVERRIDES.get(flag, "NPU_PLUGIN_" + flag.upper().replace("-", "_"))


# Value checkers: raise argparse.ArgumentTypeError with what is allowed.
def matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """An argparse type that accepts values of `pattern` (at most 253 characters), naming `what` otherwise."""

    def check(value: str) -> str:
        if len(value) > 253 or not pattern.match(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

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


def _address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)") from None
    return value


def _non_empty(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


dns_subdomain = matching(DNS_SUBDOMAIN, "a DNS subdomain (lower-case letters, digits, '-' and '.')")
resource_name = matching(RESOURCE_NAME, "an extended resource name like huawei.com/Ascend910, or auto")
safe_name = matching(_SAFE_NAME, "made of letters, digits, '-', '_' and '.' (it becomes part of a file name)")
port = _number(int, -1, 65535, "a port number from 0 to 65535, or -1 for off")
positive_seconds = _number(float, 0.01, 86400, "a number of seconds from 0.01 to 86400")
threshold = _number(int, 1, 1000, "a whole number from 1 to 1000")


def add_backend_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", choices=BACKENDS, default="auto")
    parser.add_argument("--fake-inventory", type=Path)
    parser.add_argument("--fake-profile", choices=sorted(PROFILES))
    parser.add_argument("--npu-smi", default="npu-smi", type=_non_empty)
    parser.add_argument("--dcmi-library", type=_non_empty)
    parser.add_argument("--dev-root", type=Path, default=Path("/dev"))


def add_log_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info", type=str.lower)
    parser.add_argument("--log-format", choices=("text", "json"), default="text")


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """Every `serve` flag, defaults included."""
    add = parser.add_argument
    add("--mode", choices=MODES, default="device-plugin")
    add("--node-name", type=dns_subdomain)
    add_backend_flags(parser)
    add("--health-interval", type=positive_seconds, default=5.0)
    add("--health-failure-threshold", type=threshold, default=2)
    add("--health-recovery-threshold", type=threshold, default=3)
    add("--resource-name", type=lambda v: v if v == "auto" else resource_name(v), default="auto")
    add("--device-plugin-path", type=Path, default=Path("/var/lib/kubelet/device-plugins"))
    add("--driver-name", type=dns_subdomain, default="npu.huawei.com")
    add("--device-profile", choices=("npu",), default="npu")
    add("--kubelet-registrar-directory-path", type=Path, default=Path("/var/lib/kubelet/plugins_registry"))
    add("--kubelet-plugins-directory-path", type=Path, default=Path("/var/lib/kubelet/plugins"))
    add("--cdi-root", type=Path, default=Path("/var/run/cdi"))
    add("--state-dir", type=Path)
    add("--kubeconfig", type=Path)
    add("--pod-uid", type=safe_name)
    add("--pod-resources-socket", type=Path, default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"))
    add("--dra-devices", type=_non_empty)
    add("--device-injection", choices=[i.value for i in Injection], default="nodes")
    add("--mount-driver", action="store_true")
    add("--cdi-enabled", action="store_true")
    add("--unhealthy-policy", choices=("remove", "taint"), default="remove")
    add("--healthcheck-port", type=port, default=-1)
    add("--metrics-port", type=port, default=-1)
    add("--bind-address", type=_address, default="0.0.0.0")
    add_log_flags(parser)


_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off", ""}


def env_arguments(parser: argparse.ArgumentParser, argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """Arguments standing in for environment twins of flags not given on the command line.

    They go through the same parsing as real flags, so a bad environment value is rejected the same way.
    """
    given = {arg.split("=", 1)[0] for arg in argv if arg.startswith("-")}
    extra: list[str] = []
    for action in parser._actions:
        flags = [s for s in action.option_strings if s.startswith("--")]
        if not flags or given & set(action.option_strings) or flags[0] == "--help":
            continue
        name = env_name(flags[0][2:])
        if name not in environ:
            continue
        value = environ[name]
        if isinstance(action, argparse._StoreTrueAction):
            if value.strip().lower() not in _TRUE | _FALSE:
                raise ConfigError(f"{name}={value!r}: {flags[0]} takes true or false")
            extra += [flags[0]] if value.strip().lower() in _TRUE else []
        else:
            extra.append(f"{flags[0]}={value}")
    return extra


@dataclass(frozen=True, slots=True)
class Config:
    """A validated `serve` configuration."""

    mode: str
    node_name: str | None
    backend: str
    fake_inventory: Path | None
    fake_profile: str | None
    npu_smi: str
    dcmi_library: str | None
    dev_root: Path
    health_interval: float
    health_failure_threshold: int
    health_recovery_threshold: int
    resource_name: str
    device_plugin_path: Path
    driver_name: str
    device_profile: str
    kubelet_registrar_directory_path: Path
    kubelet_plugins_directory_path: Path
    cdi_root: Path
    state_dir: Path
    kubeconfig: Path | None
    pod_uid: str | None
    pod_resources_socket: Path
    dra_devices: str | None
    device_injection: Injection
    mount_driver: bool
    cdi_enabled: bool
    unhealthy_policy: str
    healthcheck_port: int
    metrics_port: int
    bind_address: str
    log_level: str
    log_format: str

    @property
    def serves_device_plugin(self) -> bool:
        return self.mode in ("device-plugin", "both")

    @property
    def serves_dra(self) -> bool:
        return self.mode in ("dra", "both")


def config_from_args(args: argparse.Namespace) -> Config:
    """Cross-flag checks the parser cannot do alone; raises ConfigError naming the flag."""
    if args.mode in ("dra", "both") and not args.node_name:
        raise ConfigError(f"--node-name (or NODE_NAME) is required with --mode {args.mode}")
    if args.mode == "both" and not args.dra_devices:
        raise ConfigError("--dra-devices is required with --mode both (e.g. 4-7 or ring-1)")
    check_backend_args(args)
    values = {name: getattr(args, name) for name in Config.__dataclass_fields__ if hasattr(args, name)}
    values["state_dir"] = args.state_dir or args.kubelet_plugins_directory_path / args.driver_name
    values["device_injection"] = Injection(args.device_injection)
    return Config(**values)


def check_backend_args(args: argparse.Namespace) -> None:
    if args.backend == "fake" and args.fake_inventory is None and args.fake_profile is None:
        raise ConfigError(
            "--backend fake needs --fake-inventory PATH or --fake-profile NAME "
            f"(profiles: {', '.join(sorted(PROFILES))})"
        )
    if args.backend not in ("fake", "auto") and (args.fake_inventory or args.fake_profile):
        raise ConfigError(f"--fake-inventory/--fake-profile only apply to --backend fake, not {args.backend}")


def check_directories(config: Config) -> None:
    """Every directory flag the enabled modes use must be a directory where it already exists."""
    flags = {"dev-root": config.dev_root}
    if config.serves_device_plugin:
        flags["device-plugin-path"] = config.device_plugin_path
    if config.serves_dra:
        flags |= {
            "kubelet-registrar-directory-path": config.kubelet_registrar_directory_path,
            "kubelet-plugins-directory-path": config.kubelet_plugins_directory_path,
            "state-dir": config.state_dir,
        }
    if config.serves_dra or config.cdi_enabled:
        flags["cdi-root"] = config.cdi_root
    for flag, path in flags.items():
        for ancestor in (path, *path.parents):
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise ConfigError(f"--{flag} {path}: {ancestor} exists and is not a directory")
                break
