"""The `npu-plugin` command: every flag declared (with its environment twin, see `flagparser`), parsed,
validated and dispatched; the only place exit codes are decided."""

from __future__ import annotations

import argparse
import errno
import logging
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import fields, replace
from pathlib import Path

from npu_plugin import __version__
from npu_plugin.ascend.container_edits import Injection
from npu_plugin.ascend.device import DEFAULT_DRIVER
from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.fake.profiles import PROFILES
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cli.flagparser import EXIT_USAGE, BadEnvironment, FlagGroup, FlagParser, parser_class_for
from npu_plugin.config import (
    DNS_SUBDOMAIN,
    RESOURCE_NAME,
    Config,
    Mode,
    UnhealthyPolicy,
    address,
    among,
    dns_subdomain,
    kubernetes_minor,
    matching,
    non_empty,
    one_of,
    port,
    positive_seconds,
    resource_name_or_auto,
    safe_name,
    template_names,
    threshold,
)
from npu_plugin.errors import ConfigError, NpuPluginError, describe_os_error
from npu_plugin.migrate.options import KNOWN_RESOURCE_NAMES, RESOURCE_DEVICE_CLASSES, STDIO

EXIT_OK, EXIT_FAILURE = 0, 1
log = logging.getLogger(__name__)

# What an operator can do about an OSError that stops the daemon.
_REMEDIES = {
    errno.EACCES: "run as root or give the daemon write access",
    errno.EPERM: "run as root or give the daemon write access",
    errno.EROFS: "mount it read-write or choose another path",
    errno.ENOSPC: "free some space",
}
# Flags of Ascend's own device plugin (mind-cluster), as a DaemonSet written for it passes them.
_ASCEND_FLAGS = {
    "useAscendDocker": "use --device-injection runtime when Ascend Docker Runtime injects the device nodes, "
    "else the default --device-injection nodes",
    "volcanoType": "not needed: with --mode dra the Kubernetes scheduler picks devices by their attributes, "
    "and the device plugin prefers one topology group on its own",
    "presetVirtualDevice": "use --vnpu static to serve the vNPUs that exist (or --vnpu dynamic with DRA)",
    "listWatchPeriod": "use --health-interval SECONDS",
    "mode": "use --mode device-plugin|dra|both to choose the API; the chip family is discovered",
    "version": "use --version",
    "logLevel": "use --log-level debug|info|warning|error",
    "logFile": "not needed: logs go to stderr (--log-format json for collectors)",
    "edgeLogFile": "not needed: logs go to stderr (--log-format json for collectors)",
    "logDir": "not needed: logs go to stderr (--log-format json for collectors)",
    "maxAge": "not needed: logs go to stderr and the container runtime rotates them",
    "maxBackups": "not needed: logs go to stderr and the container runtime rotates them",
    "fdFlag": "not supported: FusionDirector management is not offered",
    "autoStowing": "not needed: a recovered device returns after --health-recovery-threshold good samples",
    "hotReset": "not supported: the daemon never resets devices",
    "use310PMixedInsert": "not needed: each card's model is discovered",
    "useLargeModel": "not supported: the daemon never resets devices",
    "shareDevCount": "not supported: an NPU goes to one container at a time",
    "cacheExpirePeriod": "not needed: the daemon reads no Pod cache",
}


# ---- the flags


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
    add("--fake-inventory", type=Path, metavar="PATH", help="fake backend: inventory file, re-read whenever it changes")
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
    add("--dev-root", type=Path, default=Path("/dev"), metavar="DIR", help="where the host's device nodes live")


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
        type=Path,
        metavar="PATH",
        help="fake backend: the simulated hardware's vNPUs and fault knobs (JSON)",
        shown_default="<state dir>/fake-vnpu.json with serve, none (read-only) with inventory",
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
        help="--mode both: devices DRA serves, ids, ranges or topology groups (4-7,9 or ring-1)",
    )
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
        type=Path,
        default=Path("/var/lib/kubelet/device-plugins"),
        metavar="DIR",
        help="holds kubelet.sock and the plugin's socket",
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
    dra.add_argument(
        "--device-profile",
        type=among(("npu",)),
        default="npu",
        metavar="{npu}",
        help="whole NPUs, the only profile so far",
    )
    dra.add_argument(
        "--kubelet-registrar-directory-path",
        type=Path,
        default=Path("/var/lib/kubelet/plugins_registry"),
        metavar="DIR",
        help="where the kubelet's plugin watcher looks for registration sockets",
    )
    dra.add_argument(
        "--kubelet-plugins-directory-path",
        type=Path,
        default=Path("/var/lib/kubelet/plugins"),
        metavar="DIR",
        help="the DRA socket goes in DIR/<driver name>/",
    )
    dra.add_argument(
        "--cdi-root",
        type=Path,
        default=Path("/var/run/cdi"),
        metavar="DIR",
        help="where CDI spec files are written (also with --cdi-enabled)",
    )
    dra.add_argument(
        "--state-dir",
        type=Path,
        metavar="DIR",
        help="checkpoint and lock files",
        shown_default="<plugins dir>/<driver name>",
    )
    dra.add_argument(
        "--kubeconfig",
        type=Path,
        metavar="PATH",
        help="kubeconfig file to reach the API server",
        shown_default="in-cluster service account",
    )
    dra.add_argument(
        "--pod-resources-socket",
        type=Path,
        default=Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        metavar="PATH",
        help="kubelet PodResources API, read to see which devices containers hold",
    )
    dra.add_argument(
        "--unhealthy-policy",
        type=one_of(UnhealthyPolicy),
        default=UnhealthyPolicy.REMOVE,
        metavar="{remove,taint}",
        help="unhealthy devices leave the slice, or stay with a NoSchedule taint",
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
        help="what to print; deviceclasses: one DeviceClass per vNPU template the node publishes (needs --vnpu)",
    )
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
        metavar="{remove,taint}",
        help="-o resourceslice: what unhealthy devices do",
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
        help="where to write: a file (replaced atomically), a directory receiving the migrated copy of "
        "-f DIR, or - for stdout (default -)",
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
        "--same-topology-group",
        action="store_true",
        help="claims for more than one NPU must come from one HCCS topology group (default off)",
    )
    migrate.add_argument(
        "--check",
        action="store_true",
        help="write nothing; list what would change and exit 1 if anything would or NPU requests would "
        "be left behind (default off)",
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

    command("serve", "run the daemon", _add_serve_flags).set_defaults(func=_serve)
    command("inventory", "print what discovery finds", _add_inventory_flags).set_defaults(func=_inventory)
    command(
        "migrate",
        "rewrite workloads from NPU extended-resource limits to DRA claims",
        _add_migrate_flags,
        description="Rewrite workloads asking resources.limits[RESOURCE] into ResourceClaimTemplates and claims.",
    ).set_defaults(func=_migrate)
    command("simulate", "the whole flow on this machine, no cluster needed", _add_simulate_flags).set_defaults(
        func=_simulate
    )
    command("version", "print the version").set_defaults(func=lambda _args: print(f"npu-plugin {__version__}") or 0)
    return parser


# ---- parsing


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse `argv` with environment twins applied; exits 2 on a bad flag or environment value."""
    parser = build_parser(os.environ if environ is None else environ)
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        # The image's CMD is `serve`; a DaemonSet that sets only `args:` (as the seed does) replaces it.
        argv.insert(0, "serve")
    args, unknown = parser.parse_known_args(argv)
    sub = parser.subcommands[args.command]
    if unknown:
        sub.error(_unrecognized(unknown, sub.flags))
    if bad := [value for value in vars(args).values() if isinstance(value, BadEnvironment)]:
        sub.error(str(bad[0]))
    args.given = {**sub.from_environment, **getattr(args, "given", {})}
    return args


def _unrecognized(unknown: Sequence[str], flags: Sequence[str]) -> str:
    """The first unknown argument, with the closest flag or what replaces an Ascend device-plugin flag."""
    first = next((arg for arg in unknown if arg.startswith("-")), unknown[0])
    name = first.split("=", 1)[0]
    if name.startswith("-") and (advice := _ASCEND_FLAGS.get(name.lstrip("-"))):
        return f"unrecognized argument {name}: a flag of Ascend's device plugin; {advice}"
    import difflib

    close = difflib.get_close_matches(name if name.startswith("--") else "-" + name, flags, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]}?)" if close else ""
    return f"unrecognized argument {name}{hint}"


# ---- the commands


def backend_options(args: argparse.Namespace, fake_vnpu_state: Path | None = None) -> BackendOptions:
    return BackendOptions(
        kind=args.backend,
        fake_inventory=args.fake_inventory,
        fake_profile=args.fake_profile,
        npu_smi=args.npu_smi,
        dcmi_library=args.dcmi_library,
        dev_root=args.dev_root,
        fake_vnpu_state=fake_vnpu_state,
    )


def config_from_args(args: argparse.Namespace) -> Config:
    values = {f.name: getattr(args, f.name) for f in fields(Config) if f.name != "backend"}
    config = Config(backend=backend_options(args, args.fake_vnpu_state), **values)
    if config.vnpu is not VnpuMode.OFF and config.backend.uses_fake and config.fake_vnpu_state is None:
        # The simulated hardware outlives the daemon, as real vNPUs do: next to the checkpoint.
        state = config.dra_state_dir / "fake-vnpu.json"
        config = replace(config, backend=replace(config.backend, fake_vnpu_state=state))
    return config


# Flags only DRA reads, and the two that device-plugin mode reads too when --cdi-enabled is given.
_DRA_ONLY = (
    "--kubelet-registrar-directory-path",
    "--kubelet-plugins-directory-path",
    "--device-profile",
    "--state-dir",
    "--kubeconfig",
    "--unhealthy-policy",
)
_CDI_FLAGS = ("--cdi-root", "--driver-name")


def unused_dra_flags(config: Config, given: Mapping[str, str]) -> list[str]:
    """DRA flags given (on the command line or through the environment) that this mode never reads.

    The standard KUBECONFIG variable does not count: it is often set for other programs.
    """
    if config.serves_dra:
        return []
    unused = [*_DRA_ONLY, *(() if config.cdi_enabled else _CDI_FLAGS)]
    return [flag for flag in unused if flag in given and given[flag] != "KUBECONFIG"]


def _serve(args: argparse.Namespace) -> int:
    from npu_plugin.daemon import run_daemon

    config = config_from_args(args)
    if unused := unused_dra_flags(config, args.given):
        log.warning(
            "%s only apply to DRA and are unused in --mode %s; add --mode dra (or --mode both with "
            "--dra-devices LIST) to serve DRA",
            ", ".join(unused),
            config.mode,
            extra={"flags": unused},
        )
    return run_daemon(config)


def _inventory(args: argparse.Namespace) -> int:
    from npu_plugin.cli.inventory import Output, run_inventory

    output = Output(
        args.output,
        node_name=args.node_name,
        driver=args.driver_name,
        unhealthy_policy=args.unhealthy_policy,
        vnpu=args.vnpu,
        vnpu_templates=args.vnpu_templates,
        kubernetes_minor=args.kubernetes_version,
    )
    return run_inventory(backend_options(args, args.fake_vnpu_state), output)


def _migrate(args: argparse.Namespace) -> int:
    from npu_plugin.cli.migrate import run

    return run(args)


def _simulate(args: argparse.Namespace) -> int:
    from npu_plugin.cli.simulate import DEMO_PROFILE, run_simulation

    kind, inventory, profile = args.backend, args.fake_inventory, args.fake_profile
    if kind is BackendKind.FAKE and inventory is None and profile is None:
        args.fake_profile = DEMO_PROFILE
    return run_simulation(args.mode, backend_options(args), args.dra_devices, args.vnpu)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from npu_plugin.logs import setup_logging

    if hasattr(args, "log_level"):
        setup_logging(args.log_level, args.log_format)
    try:
        return int(args.func(args))
    except ConfigError as error:
        _report(args, str(error))
        return EXIT_USAGE
    except NpuPluginError as error:
        _report(args, str(error))
        return EXIT_FAILURE
    except OSError as error:
        # The environment, not a bug: a directory or socket we may not use, a disk that is full.
        remedy = _REMEDIES.get(error.errno or 0)
        _report(args, describe_os_error(error) + (f": {remedy}" if remedy else ""))
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception:
        # A bug, not a user error: the traceback goes through the log format, one line like every event.
        logging.getLogger(__name__).critical(
            "npu-plugin %s stopped on an unexpected error", args.command, exc_info=True
        )
        return EXIT_FAILURE


def _report(args: argparse.Namespace, message: str) -> None:
    """An expected failure: one plain line, or one JSON event when machines read the log."""
    line = f"npu-plugin {args.command}: error: {message}"
    if getattr(args, "log_format", "text") == "json":
        logging.getLogger(__name__).error(line, extra={"error": message})
    else:
        print(line, file=sys.stderr)
