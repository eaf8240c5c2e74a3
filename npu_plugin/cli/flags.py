"""Every flag of the `npu-plugin` command, declared per command with its environment twin (see
`flagparser`) and its value type (see `flagtypes`); `main.py` parses and dispatches."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from pathlib import Path

from npu_plugin import __version__
from npu_plugin.ascend.container_edits import Injection
from npu_plugin.ascend.device import DEFAULT_DRIVER
from npu_plugin.ascend.shares import DEFAULT_SHARE_COUNT, ShareAllocation
from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.fake.profiles import PROFILES
from npu_plugin.backends.options import BackendKind
from npu_plugin.cli.flagparser import FlagGroup, FlagParser, parser_class_for
from npu_plugin.cli.flagtypes import (
    DNS_SUBDOMAIN,
    RESOURCE_NAME,
    absolute_path,
    address,
    among,
    boolean,
    dns_subdomain,
    kubernetes_minor,
    matching,
    non_empty,
    one_of,
    port,
    positive_seconds,
    resource_name_or_auto,
    safe_name,
    seconds,
    share_count,
    template_names,
    threshold,
)
from npu_plugin.config import Mode, UnhealthyPolicy
from npu_plugin.migrate.options import KNOWN_RESOURCE_NAMES, RESOURCE_DEVICE_CLASSES, STDIO


def _add_backend_flags(parser: FlagParser, default: BackendKind = BackendKind.AUTO) -> None:
    group = parser.add_flag_group("discovery", "where the NPUs are read from")
    add = group.add_argument
    add(
        "--backend",
        type=one_of(BackendKind),
        metavar="{auto,dcmi,npu-smi,fake}",
        default=default,
        help="discovery source: auto tries DCMI, then npu-smi",
    )
    add(
        "--fake-inventory",
        type=absolute_path,
        metavar="PATH",
        help="fake backend: inventory file, re-read whenever it changes",
    )
    add(
        "--fake-profile",
        type=among(sorted(PROFILES)),
        metavar="NAME",
        help=f"fake backend: built-in inventory ({', '.join(sorted(PROFILES))})",
    )
    add(
        "--npu-smi",
        type=non_empty,
        default="npu-smi",
        metavar="PATH",
        help="npu-smi executable for the npu-smi backend",
        shown_default="npu-smi on PATH",
    )
    add(
        "--dcmi-library",
        type=non_empty,
        metavar="PATH",
        help="DCMI library for the dcmi backend",
        shown_default="libdcmi.so via the loader path",
    )
    add(
        "--dev-root", type=absolute_path, default=Path("/dev"), metavar="DIR", help="where the host's device nodes live"
    )


def _add_vnpu_mode_flag(group: FlagGroup) -> None:
    group.add_argument(
        "--vnpu",
        type=one_of(VnpuMode),
        default=VnpuMode.OFF,
        metavar="{off,static,dynamic}",
        help="off: whole NPUs only; static: also serve the vNPUs that exist; dynamic (DRA): also create them on demand",
    )


def _add_vnpu_flags(parser: FlagParser) -> None:
    group = parser.add_flag_group("virtual NPUs")
    _add_vnpu_mode_flag(group)
    group.add_argument(
        "--vnpu-templates",
        type=template_names,
        metavar="LIST",
        help="--vnpu dynamic: the templates to offer, a comma list like vir05_1c_16g",
        shown_default="every template a chip offers",
    )
    group.add_argument(
        "--fake-vnpu-state",
        type=absolute_path,
        metavar="PATH",
        help="fake backend: the simulated hardware's vNPUs and fault knobs (JSON)",
        shown_default="<state dir>/fake-vnpu.json with serve, none (read-only) with inventory",
    )


def _add_share_flags(group: FlagGroup, *, allocation: bool = True) -> None:
    group.add_argument(
        "--share-devices",
        type=str,
        metavar="LIST",
        help="chips several pods use at once, whole (ids, ranges, topology groups, or all): the device plugin "
        "lists each --share-count times, DRA publishes it with consumable capacity; never split into vNPUs",
        shown_default="none",
    )
    group.add_argument(
        "--share-count",
        type=share_count,
        metavar="N",
        help="shares per shared chip, 2 to 100 (DRA: a claim's default memory is the chip's memory / N)",
        shown_default=str(DEFAULT_SHARE_COUNT),
    )
    if not allocation:
        return
    group.add_argument(
        "--share-allocation",
        type=one_of(ShareAllocation),
        default=ShareAllocation.SPREAD,
        metavar="{spread,pack}",
        help="device plugin: which shares a pod is offered first, one of the least used chips (spread) or of "
        "the most used ones (pack)",
    )


def _add_log_flags(parser: FlagParser, default_level: str = "info") -> None:
    group = parser.add_flag_group("logging")
    group.add_argument(
        "--log-level",
        type=among(("debug", "info", "warning", "error"), str.lower),
        default=default_level,
        metavar="{debug,info,warning,error}",
        help="least severe event logged",
    )
    group.add_argument(
        "--log-format",
        type=among(("text", "json")),
        default="text",
        metavar="{text,json}",
        help="one line per event: plain text, or a JSON object for collectors",
    )


def _add_serve_flags(serve: FlagParser) -> None:
    what = serve.add_flag_group("what to serve")
    what.add_argument(
        "--mode",
        type=one_of(Mode),
        default=Mode.DEVICE_PLUGIN,
        metavar="{device-plugin,dra,both}",
        help="which kubelet APIs to serve",
    )
    what.add_argument(
        "--node-name", type=dns_subdomain, metavar="NAME", help="this node's name; required with --mode dra|both"
    )
    what.add_argument(
        "--dra-devices",
        type=non_empty,
        metavar="LIST",
        help="--mode both: devices DRA serves, ids, ranges, topology groups, all or none (4-7,9 or ring-1); the "
        "Node's npu.huawei.com/dra-devices annotation or label wins",
    )
    _add_share_flags(what)
    what.add_argument(
        "--pod-uid",
        type=safe_name,
        metavar="UID",
        help="this pod's UID, carried in socket names so two daemons can overlap in a rolling update",
    )
    what.add_argument(
        "--device-injection",
        type=one_of(Injection),
        default=Injection.NODES,
        metavar="{nodes,runtime}",
        help="nodes: device nodes and env; runtime: env only (Ascend Docker Runtime adds the nodes)",
    )
    what.add_argument(
        "--pod-annotations",
        type=boolean,
        nargs="?",
        const=True,
        metavar="true|false",
        help="write MindCluster's pod annotations (huawei.com/kltDev, huawei.com/AscendReal, "
        "ascend.kubectl.kubernetes.io/ascend-910-configuration) on the pods that got NPUs, in every mode",
        shown_default="on when API credentials exist (in-cluster token or --kubeconfig)",
    )
    what.add_argument("--mount-driver", action="store_true", help="also mount the driver read-only into containers")
    _add_backend_flags(serve)
    health = serve.add_flag_group("health")
    health.add_argument(
        "--health-interval", type=positive_seconds, default=5.0, metavar="SECONDS", help="time between health samples"
    )
    health.add_argument(
        "--health-failure-threshold",
        type=threshold,
        default=2,
        metavar="N",
        help="consecutive bad samples before a device turns Unhealthy",
    )
    health.add_argument(
        "--health-recovery-threshold",
        type=threshold,
        default=3,
        metavar="N",
        help="consecutive good samples before it turns Healthy again",
    )
    health.add_argument(
        "--link-down-timeout",
        type=seconds,
        default=30.0,
        metavar="SECONDS",
        help="910 family: a RoCE link down this long makes its NPU Unhealthy (0: at the first sample that reads it "
        "down)",
    )
    plugin = serve.add_flag_group("device plugin (--mode device-plugin|both)")
    plugin.add_argument(
        "--resource-name",
        type=resource_name_or_auto,
        default="auto",
        metavar="NAME",
        help="extended resource; auto picks huawei.com/Ascend910, Ascend310P or Ascend310",
    )
    plugin.add_argument(
        "--device-plugin-path",
        type=absolute_path,
        default=Path("/var/lib/kubelet/device-plugins"),
        metavar="DIR",
        help="holds kubelet.sock and the plugin's socket",
    )
    plugin.add_argument(
        "--volcano",
        action="store_true",
        help="serve the devices Volcano's Ascend plugin chose (the pod annotation huawei.com/Ascend910 of the oldest "
        "pending pod with an unused predicate-time, as MindCluster's -volcanoType) instead of the kubelet's ids",
    )
    plugin.add_argument(
        "--cdi-enabled",
        action="store_true",
        help="also answer Allocate with CDI device names (spec written to --cdi-root, vendor --driver-name)",
    )
    dra = serve.add_flag_group("DRA (--mode dra|both)")
    dra.add_argument(
        "--driver-name",
        type=dns_subdomain,
        default=DEFAULT_DRIVER,
        metavar="NAME",
        help="DRA driver name (also the CDI vendor with --cdi-enabled)",
    )
    # The seed DaemonSet passes --device-profile=npu; it selects nothing (vNPUs are --vnpu), so it is
    # accepted with its one value and left out of --help.
    dra.add_argument("--device-profile", type=among(("npu",)), default="npu", help=argparse.SUPPRESS)
    dra.add_argument(
        "--kubelet-registrar-directory-path",
        type=absolute_path,
        default=Path("/var/lib/kubelet/plugins_registry"),
        metavar="DIR",
        help="where the kubelet's plugin watcher looks for registration sockets",
    )
    dra.add_argument(
        "--kubelet-plugins-directory-path",
        type=absolute_path,
        default=Path("/var/lib/kubelet/plugins"),
        metavar="DIR",
        help="the DRA socket goes in DIR/<driver name>/",
    )
    dra.add_argument(
        "--cdi-root",
        type=absolute_path,
        default=Path("/var/run/cdi"),
        metavar="DIR",
        help="where CDI spec files are written (also with --cdi-enabled)",
    )
    dra.add_argument(
        "--state-dir",
        type=absolute_path,
        metavar="DIR",
        help="checkpoint and lock files",
        shown_default="<plugins dir>/<driver name>",
    )
    dra.add_argument(
        "--kubeconfig",
        type=absolute_path,
        metavar="PATH",
        help="kubeconfig file to reach the API server",
        shown_default="in-cluster service account",
    )
    dra.add_argument(
        "--pod-resources-socket",
        type=absolute_path,
        default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        metavar="PATH",
        help="kubelet PodResources API, read to see which devices containers hold (also which container an "
        "Allocate served, for --pod-annotations)",
    )
    dra.add_argument(
        "--unhealthy-policy",
        type=one_of(UnhealthyPolicy),
        default=UnhealthyPolicy.AUTO,
        metavar="{auto,remove,taint}",
        help="unhealthy devices stay in the slice with health and fault taints (auto: when the API server keeps "
        "device taints, else they leave it), leave the slice (remove), or always stay tainted (taint)",
    )
    dra.add_argument(
        "--fault-policy",
        type=Path,
        metavar="FILE",
        help="YAML list of {codes: [...], effect: None|NoSchedule|NoExecute}: the effect of the fault taint for "
        "these fault codes (re-read when it changes)",
        shown_default="every fault taint has effect None",
    )
    dra.add_argument(
        "--claim-status",
        action="store_true",
        help="write each prepared claim's status.devices (a Ready condition, physicalId, visibleDevices, device IP, "
        "vNPU id and template) and remove it at Unprepare",
    )
    probes = serve.add_flag_group("probes and metrics")
    probes.add_argument(
        "--healthcheck-port",
        type=port,
        default=-1,
        metavar="N",
        help="gRPC health service port; -1 off, 0 any free port",
    )
    probes.add_argument("--metrics-port", type=port, default=-1, metavar="N", help="Prometheus /metrics port; -1 off")
    probes.add_argument(
        "--bind-address", type=address, default="0.0.0.0", metavar="ADDR", help="address of the two ports above"
    )
    _add_vnpu_flags(serve)
    _add_log_flags(serve)


def _add_inventory_flags(inventory: FlagParser) -> None:
    _add_backend_flags(inventory)
    output = inventory.add_flag_group("output")
    output.add_argument(
        "--output",
        "-o",
        type=among(("table", "json", "yaml", "resourceslice", "deviceclasses")),
        default="table",
        metavar="{table,json,yaml,resourceslice,deviceclasses}",
        help="what to print; deviceclasses: a DeviceClass with extendedResourceName per device-plugin resource "
        "the node can advertise (vNPU ones with --vnpu), and with --vnpu one per vNPU template",
    )
    _add_share_flags(output, allocation=False)
    output.add_argument(
        "--kubernetes-version",
        type=kubernetes_minor,
        default=35,
        metavar="X.Y",
        shown_default="1.35",
        help="-o resourceslice with --vnpu: the API server's version, which decides the layout of counters "
        "(split from 1.35, combined on 1.34)",
    )
    output.add_argument(
        "--node-name", type=dns_subdomain, metavar="NAME", help="-o resourceslice: the node the slices are for"
    )
    output.add_argument(
        "--driver-name",
        type=dns_subdomain,
        default=DEFAULT_DRIVER,
        metavar="NAME",
        help="-o resourceslice: DRA driver name",
    )
    output.add_argument(
        "--unhealthy-policy",
        type=one_of(UnhealthyPolicy),
        default=UnhealthyPolicy.REMOVE,
        metavar="{auto,remove,taint}",
        help="-o resourceslice: what unhealthy devices do (auto renders as taint)",
    )
    _add_vnpu_flags(inventory)
    _add_log_flags(inventory)


def _add_migrate_flags(migrate: FlagParser) -> None:
    migrate.add_argument(
        "-f",
        "--filename",
        default=STDIO,
        metavar="FILE|DIR",
        help="manifests to read: a file, a directory (every *.yaml, *.yml, *.json below it) or - for stdin (default -)",
    )
    migrate.add_argument(
        "-o",
        "--output",
        metavar="FILE|DIR",
        twin_owner="inventory",
        help="where to write: a file (replaced atomically), a directory receiving the migrated copy of "
        "-f DIR, or - for stdout (default -)",
    )
    migrate.add_argument(
        "--exclude",
        action="append",
        metavar="GLOB",
        help="with -f DIR: leave out files and directories whose path below DIR or name matches; repeat for "
        "several (default none)",
    )
    migrate.add_argument(
        "--in-place",
        action="store_true",
        help="rewrite the input files themselves, only those that change (default off)",
    )
    migrate.add_argument(
        "--resource-name",
        action="append",
        metavar="NAME",
        type=matching(RESOURCE_NAME, "an extended resource name like huawei.com/Ascend910"),
        twin_owner="serve",
        help=f"extended resource to migrate; repeat for several (default all of {', '.join(KNOWN_RESOURCE_NAMES)})",
    )
    migrate.add_argument(
        "--device-class",
        metavar="NAME",
        type=matching(DNS_SUBDOMAIN, "a DeviceClass name (a DNS subdomain)"),
        help="DeviceClass every generated claim asks for (default per resource name: "
        + ", ".join(f"{name} -> {cls}" for name, cls in RESOURCE_DEVICE_CLASSES.items())
        + ")",
    )
    migrate.add_argument(
        "--shared-device-class",
        metavar="NAME",
        type=matching(DNS_SUBDOMAIN, "a DeviceClass name (a DNS subdomain)"),
        help="HAMi-style <resource>-memory/-core requests for one NPU become a claim for a share of a shared NPU "
        "of this class (e.g. shared.npu.huawei.com), asking memory and aiCore capacity (default: a vNPU claim)",
    )
    migrate.add_argument(
        "--same-topology-group",
        action="store_true",
        help="claims for more than one NPU must come from one HCCS topology group (default off)",
    )
    migrate.add_argument(
        "--check",
        action="store_true",
        help="write nothing; list what would change and exit 1 if anything would, NPU requests would be left "
        "behind, or something migrate cannot fix remains (default off)",
    )


def _add_plan_flags(plan: FlagParser) -> None:
    cluster = plan.add_flag_group("cluster", "what is read (list and get only; nothing is written)")
    cluster.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="kubeconfig file to reach the API server",
        shown_default="~/.kube/config when it exists, else the in-cluster service account",
    )
    cluster.add_argument(
        "--node",
        action="append",
        type=dns_subdomain,
        metavar="NAME",
        help="plan this node; repeat for several",
        shown_default="every NPU node",
    )
    cluster.add_argument(
        "--driver-name", type=dns_subdomain, default=DEFAULT_DRIVER, metavar="NAME", help="DRA driver name"
    )
    what = plan.add_flag_group("plan")
    what.add_argument(
        "--to",
        type=among(("dra", "device-plugin", "both")),
        default="dra",
        metavar="{dra,device-plugin,both}",
        help="the mode the nodes should reach",
    )
    what.add_argument(
        "--output",
        "-o",
        type=among(("table", "json", "yaml")),
        default="table",
        metavar="{table,json,yaml}",
        twin_owner="inventory",
        help="table for people; json and yaml in the stable shape of docs/migration.md",
    )


def _add_simulate_flags(simulate: FlagParser) -> None:
    what = simulate.add_flag_group("what to simulate")
    what.add_argument(
        "--mode",
        type=one_of(Mode),
        default=Mode.BOTH,
        metavar="{device-plugin,dra,both}",
        help="which kubelet APIs the simulated daemon serves",
    )
    what.add_argument(
        "--dra-devices",
        type=non_empty,
        metavar="LIST",
        help="--mode both: devices DRA serves",
        shown_default="the upper half of the node",
    )
    _add_vnpu_mode_flag(what)
    what.add_argument(
        "--share",
        action="store_true",
        help="also walk two pods on one NPU: the first chip of each side shared in 4 (device plugin shares, DRA "
        "consumable capacity)",
    )
    _add_backend_flags(simulate, BackendKind.FAKE)
    _add_log_flags(simulate, "error")


def build_parser(environ: Mapping[str, str]) -> FlagParser:
    parser_class = parser_class_for(environ)
    parser = parser_class(prog="npu-plugin", description="Huawei Ascend NPUs for Kubernetes: Device Plugin and DRA.")
    parser.add_argument("--version", action="version", version=f"npu-plugin {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=parser_class)

    def command(
        name: str,
        help_text: str,
        add_flags: Callable[[FlagParser], None] | None = None,
        description: str | None = None,
    ) -> FlagParser:
        sub: FlagParser = commands.add_parser(name, help=help_text, description=description or help_text)
        parser.subcommands[name] = sub
        if add_flags is not None:
            add_flags(sub)
        return sub

    command("serve", "run the daemon", _add_serve_flags)
    command("inventory", "print what discovery finds", _add_inventory_flags)
    command(
        "migrate",
        "rewrite workloads from NPU extended-resource limits to DRA claims",
        _add_migrate_flags,
        description="Rewrite workloads asking resources.limits[RESOURCE] into ResourceClaimTemplates and claims.",
    )
    command(
        "plan",
        "say node by node how to reach DRA without disruption (reads the cluster, writes nothing)",
        _add_plan_flags,
        description="Read the live cluster (list and get only) and print, node by node, the verdict, the "
        "reasons and the commands that move it to --to; exit 0 when every node can move now, 1 otherwise, "
        "2 on bad usage or no cluster.",
    )
    command("simulate", "the whole flow on this machine, no cluster needed", _add_simulate_flags)
    command("version", "print the version")
    return parser
