"""Every flag of MindCluster's device plugin and what npu-plugin does instead (pure data).

The flags are those `main.go` of Ascend/mind-cluster `component/ascend-device-plugin` defines in any
release (and its predecessor's `logDir`), with the newest ones its startup-parameter table lists
(`-softShareDevConfigDir`, `-useSingleDieMode`, `--enable-healthz`, `--healthz-address`, the TLS
files), as a DaemonSet written for that plugin passes them. Go's
flag package reads `-name` and `--name` alike, `-name=value` or `-name value` (a bool flag only
`-name=value`). `serve` names each one it is given with its entry here; the table in
docs/mindcluster.md is generated from this one, and a test keeps them equal.
"""

from __future__ import annotations

from dataclasses import dataclass

_LOGS = "not needed: npu-plugin logs to stderr, one line per event (`--log-format json` for collectors)"
_ROTATION = "not needed: npu-plugin logs to stderr and the container runtime rotates the log"
_POD_CACHE = "not needed: npu-plugin keeps no Pod informer or cache"
_PLAIN_PORTS = (
    "not offered: the health (gRPC) and metrics (HTTP) ports serve no TLS, so keep them off the network with "
    "`--bind-address ADDR` or a NetworkPolicy"
)


@dataclass(frozen=True, slots=True)
class MindClusterFlag:
    name: str  # as MindCluster spells it, without the dashes
    kind: str  # its Go type
    default: str  # MindCluster's default
    instead: str  # what npu-plugin does instead (a flag, its default, or why none is needed); `code` marked

    @property
    def takes_value(self) -> bool:
        """Whether the next argument is its value when it has no `=`: Go's bool flags take none."""
        return self.kind != "bool"

    @property
    def advice(self) -> str:
        """`instead` as a terminal shows it."""
        return self.instead.replace("`", "")


FLAGS = (
    MindClusterFlag(
        "autoStowing",
        "bool",
        "true",
        "not needed: a device that recovers returns on its own after `--health-recovery-threshold` good "
        "samples (default 3), with no manual stow",
    ),
    MindClusterFlag("cacheExpirePeriod", "int64", "30", _POD_CACHE),
    MindClusterFlag("checkCachedPods", "bool", "true", _POD_CACHE),
    MindClusterFlag("dealWatchHandler", "bool", "false", _POD_CACHE),
    MindClusterFlag(
        "deviceResetTimeout",
        "int",
        "600",
        "not offered: npu-plugin serves the NPUs the driver reports when it starts and waits for no missing "
        "one, so restart its pod once the driver reports them all",
    ),
    MindClusterFlag("edgeLogFile", "string", "/var/alog/AtlasEdge_log/devicePlugin.log", _LOGS),
    MindClusterFlag(
        "enable-healthz",
        "bool",
        "false",
        "`--healthcheck-port N`: a gRPC health service (off at -1, the default, and 51515 in the overlays, "
        "which probe it)",
    ),
    MindClusterFlag(
        "enableSlowNode",
        "bool",
        "false",
        "not offered: npu-plugin sets no slow-node detection environment in containers",
    ),
    MindClusterFlag("fdFlag", "bool", "false", "not offered: npu-plugin has no FusionDirector (edge) management"),
    MindClusterFlag(
        "healthz-address", "string", "11251", "`--healthcheck-port N`, with `--bind-address ADDR` for the address"
    ),
    MindClusterFlag(
        "hotReset",
        "int",
        "-1",
        "not offered: npu-plugin never resets an NPU (MindCluster's default, -1), and a faulty NPU turns "
        "Unhealthy and returns after `--health-recovery-threshold` good samples",
    ),
    MindClusterFlag("kubeConfig", "string", "", "`--kubeconfig PATH` (default: the in-cluster service account)"),
    MindClusterFlag(
        "linkdownTimeout",
        "int64",
        "30",
        "`--link-down-timeout SECONDS` (default 30): how long a RoCE link may stay down before its NPU turns Unhealthy",
    ),
    MindClusterFlag(
        "listWatchPeriod", "int", "5", "`--health-interval SECONDS` (default 5): the time between health samples"
    ),
    MindClusterFlag("logDir", "string", "/var/alog/AtlasEdge_log", _LOGS),
    MindClusterFlag("logFile", "string", "/var/log/mindx-dl/devicePlugin/devicePlugin.log", _LOGS),
    MindClusterFlag(
        "logLevel",
        "int",
        "0",
        "`--log-level debug|info|warning|error` (default info): -1 is debug, 0 info, 1 warning, 2 and 3 error",
    ),
    MindClusterFlag("maxAge", "int", "7", _ROTATION),
    MindClusterFlag("maxBackups", "int", "30", _ROTATION),
    MindClusterFlag(
        "mode",
        "string",
        "",
        "not needed: the chip family is discovered (ascend310, ascend310P, ascend910 alike), and npu-plugin's "
        "own `--mode device-plugin|dra|both` chooses the kubelet API",
    ),
    MindClusterFlag(
        "presetVirtualDevice",
        "bool",
        "true",
        "`--vnpu static` serves the vNPUs that exist (npu-plugin's default is `--vnpu off`, whole NPUs only), "
        "and `--vnpu dynamic` with `--mode dra` creates them per claim",
    ),
    MindClusterFlag(
        "shareDevCount",
        "uint",
        "1",
        "`--share-devices all --share-count N`: each chip listed N times, so N containers use it at once "
        "(MindCluster's default, 1, shares nothing, as npu-plugin does by default)",
    ),
    MindClusterFlag(
        "softShareDevConfigDir",
        "string",
        "",
        "not offered: npu-plugin has no soft partitioning (vCANN-RT), only the driver's vNPUs (`--vnpu`)",
    ),
    MindClusterFlag(
        "thirdPartyScanDelay",
        "int",
        "300",
        "not needed: npu-plugin resets nothing, and an NPU another tool resets is seen by the next health sample",
    ),
    MindClusterFlag("tls-cert-file", "string", "", _PLAIN_PORTS),
    MindClusterFlag("tls-private-key-file", "string", "", _PLAIN_PORTS),
    MindClusterFlag(
        "use310PMixedInsert",
        "bool",
        "false",
        "not offered: every 310P card is served as `huawei.com/Ascend310P`, whatever its model (V, VPro, IPro)",
    ),
    MindClusterFlag(
        "useAscendDocker",
        "bool",
        "true",
        "`--device-injection runtime` where Ascend Docker Runtime adds the device nodes (it reads "
        "`ASCEND_VISIBLE_DEVICES`), else the default `--device-injection nodes`",
    ),
    MindClusterFlag(
        "useLargeModel",
        "bool",
        "false",
        "not offered: it only qualified `-hotReset`, and npu-plugin never resets an NPU",
    ),
    MindClusterFlag(
        "useSingleDieMode",
        "bool",
        "false",
        "not offered: it serves soft partitioning on Atlas A3 inference products, which npu-plugin does not offer",
    ),
    MindClusterFlag("version", "bool", "false", "`--version`, or `npu-plugin version`"),
    MindClusterFlag(
        "volcanoType",
        "bool",
        "false",
        "`--volcano` (device-plugin mode): Allocate serves the NPUs Volcano's Ascend plugin chose, while with "
        "`--mode dra` the scheduler itself picks devices by their attributes",
    ),
)
BY_NAME = {flag.name: flag for flag in FLAGS}
