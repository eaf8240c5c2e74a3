"""The daemon's configuration as values: the enums, `Config` and the checks on them
(`BackendOptions`, where devices come from, lives beside the backends in `backends/options.py`).

Flags are declared in `cli/flags.py` and their values checked by `cli/flagtypes.py`; this module
knows nothing about argparse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from npu_plugin.ascend.container_edits import Injection
from npu_plugin.ascend.device import DEFAULT_DRIVER
from npu_plugin.ascend.shares import ShareAllocation
from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.options import BackendOptions
from npu_plugin.errors import ConfigError


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
    """What a ResourceSlice does with an unhealthy device: keep it with taints that say why (auto:
    when the API server keeps device taints, else as remove), leave it out, or always taint."""

    AUTO = "auto"
    REMOVE = "remove"
    TAINT = "taint"


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
    link_down_timeout: float = 30.0
    resource_name: str = "auto"
    device_plugin_path: Path = Path("/var/lib/kubelet/device-plugins")
    driver_name: str = DEFAULT_DRIVER
    kubelet_registrar_directory_path: Path = Path("/var/lib/kubelet/plugins_registry")
    kubelet_plugins_directory_path: Path = Path("/var/lib/kubelet/plugins")
    cdi_root: Path = Path("/var/run/cdi")
    state_dir: Path | None = None
    kubeconfig: Path | None = None
    pod_uid: str | None = None
    pod_resources_socket: Path = Path("/var/lib/kubelet/pod-resources/kubelet.sock")
    dra_devices: str | None = None
    share_devices: str | None = None  # resolved against the devices found at start (inventory/sharing.py)
    share_count: int | None = None  # None: not given (DEFAULT_SHARE_COUNT)
    share_allocation: ShareAllocation = ShareAllocation.SPREAD
    device_injection: Injection = Injection.NODES
    mount_driver: bool = False
    cdi_enabled: bool = False
    unhealthy_policy: UnhealthyPolicy = UnhealthyPolicy.AUTO
    fault_policy: Path | None = None
    claim_status: bool = False
    pod_annotations: bool | None = None  # None: on when API credentials exist
    volcano: bool = False
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
        if (self.volcano or self.pod_annotations) and not self.node_name:
            flag = "--volcano" if self.volcano else "--pod-annotations"
            raise ConfigError(
                f"{flag} needs --node-name (or NODE_NAME): only pods bound to this node are read and written"
            )
        if self.volcano and not self.mode.serves_device_plugin:
            raise ConfigError("--volcano chooses the devices of Allocate: it needs --mode device-plugin or both")
        if self.volcano and self.share_devices:
            raise ConfigError(
                "--volcano serves the whole NPUs Volcano names; it cannot be combined with --share-devices"
            )
        if self.volcano and self.pod_annotations is False:
            raise ConfigError(
                "--volcano marks served pods and writes their annotations as MindCluster does; it cannot be combined "
                "with --pod-annotations=false"
            )
        if self.healthcheck_port > 0 and self.healthcheck_port == self.metrics_port:
            raise ConfigError(
                f"--healthcheck-port {self.healthcheck_port} and --metrics-port {self.metrics_port}: the gRPC "
                "health service and the metrics server cannot share a port; choose two ports"
            )

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
    if config.kubeconfig is not None and not config.kubeconfig.is_file():
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
