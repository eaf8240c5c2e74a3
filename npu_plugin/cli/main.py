"""The `npu-plugin` command: its flags (declared in `flags.py`) parsed, validated and dispatched;
the only place exit codes are decided."""

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
from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cli.flagparser import EXIT_USAGE, BadEnvironment, Unknown
from npu_plugin.cli.flags import build_parser
from npu_plugin.cli.mindcluster import BY_NAME as MINDCLUSTER_FLAGS
from npu_plugin.config import (
    Config,
)
from npu_plugin.errors import ConfigError, NpuPluginError, describe_os_error

EXIT_OK, EXIT_FAILURE = 0, 1
log = logging.getLogger(__name__)

# What an operator can do about an OSError that stops the daemon.
_REMEDIES = {
    errno.EACCES: "run as root or give the daemon write access",
    errno.EPERM: "run as root or give the daemon write access",
    errno.EROFS: "mount it read-write or choose another path",
    errno.ENOSPC: "free some space",
}
# ---- parsing


def parse_args(argv: Sequence[str], environ: Mapping[str, str] | None = None) -> argparse.Namespace:
    """Parse `argv` with environment twins applied; exits 2 on a bad flag or environment value."""
    parser = build_parser(os.environ if environ is None else environ)
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help", "--version")):
        # The image's CMD is `serve`; a DaemonSet that sets only `args:` (as the seed does) replaces
        # it.
        argv.insert(0, "serve")
    command = parser.subcommands.get(argv[0])
    if command is not None and (unknown := command.unknown_flags(argv[1:], _takes_value)):
        command.error(_unrecognized(unknown, command.flags))
    args, rest = parser.parse_known_args(argv)
    sub = parser.subcommands[args.command]
    if rest:
        sub.error(f"unrecognized argument {rest[0]}")
    if bad := [value for value in vars(args).values() if isinstance(value, BadEnvironment)]:
        sub.error(str(bad[0]))
    args.given = {**sub.from_environment, **getattr(args, "given", {})}
    return args


def _takes_value(name: str) -> bool:
    """Whether an unknown flag without `=` takes the next argument: a MindCluster flag that is no
    bool does."""
    flag = MINDCLUSTER_FLAGS.get(name)
    return flag is not None and flag.takes_value


def _unrecognized(unknown: Sequence[Unknown], flags: Sequence[str]) -> str:
    """Every unknown flag in one line: each with the closest flag of ours, and MindCluster's with
    what npu-plugin does instead."""
    foreign = [item for item in unknown if item.name in MINDCLUSTER_FLAGS]
    listed = ", ".join(item.given if item in foreign else item.given + _hint(item, flags) for item in unknown)
    line = f"unrecognized argument{'s' if len(unknown) > 1 else ''} {listed}"
    if not foreign:
        return line
    instead = "; ".join(f"{item.given}: {MINDCLUSTER_FLAGS[item.name].advice}" for item in foreign)
    flag = "a flag" if len(foreign) == 1 else "flags"
    return (
        f"{line}: {flag} of MindCluster's device plugin (docs/mindcluster.md), what npu-plugin does instead: {instead}"
    )


def _hint(item: Unknown, flags: Sequence[str]) -> str:
    import difflib

    close = difflib.get_close_matches("--" + item.name, flags, n=1, cutoff=0.6)
    if close:
        return f" (did you mean {close[0]}?)"
    return " (npu-plugin's flags start with --)" if item.one_dash else ""


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


# Flags only DRA reads, and the two that device-plugin mode reads too when --cdi-enabled is given
# (--kubeconfig it reads for the pod annotations unless --pod-annotations=false).
_DRA_ONLY = (
    "--kubelet-registrar-directory-path",
    "--kubelet-plugins-directory-path",
    "--state-dir",
    "--unhealthy-policy",
    "--fault-policy",
    "--claim-status",
)
_CDI_FLAGS = ("--cdi-root", "--driver-name")


def unused_dra_flags(config: Config, given: Mapping[str, str]) -> list[str]:
    """DRA flags given (on the command line or through the environment) that this mode never reads.

    The standard KUBECONFIG variable does not count: it is often set for other programs.
    """
    if config.serves_dra:
        return []
    unused = [*_DRA_ONLY, *(() if config.cdi_enabled else _CDI_FLAGS)]
    if config.pod_annotations is False:
        unused.append("--kubeconfig")
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
        share_devices=args.share_devices,
        share_count=args.share_count,
    )
    return run_inventory(backend_options(args, args.fake_vnpu_state), output)


def _migrate(args: argparse.Namespace) -> int:
    from npu_plugin.cli.migrate import run

    return run(args)


def _plan(args: argparse.Namespace) -> int:
    from npu_plugin.cli.plan import run_plan

    return run_plan(args.kubeconfig, args.driver_name, args.to, tuple(args.node or ()), args.output)


def _simulate(args: argparse.Namespace) -> int:
    from npu_plugin.cli.simulate import DEMO_PROFILE, run_simulation

    kind, inventory, profile = args.backend, args.fake_inventory, args.fake_profile
    if kind is BackendKind.FAKE and inventory is None and profile is None:
        args.fake_profile = DEMO_PROFILE
    return run_simulation(args.mode, backend_options(args), args.dra_devices, args.vnpu, args.share)


def _version(_args: argparse.Namespace) -> int:
    print(f"npu-plugin {__version__}")
    return EXIT_OK


_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "serve": _serve,
    "inventory": _inventory,
    "migrate": _migrate,
    "plan": _plan,
    "simulate": _simulate,
    "version": _version,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from npu_plugin.logs import setup_logging

    if hasattr(args, "log_level"):
        setup_logging(args.log_level, args.log_format)
    try:
        return int(_COMMANDS[args.command](args))
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
        # A bug, not a user error: the traceback goes through the log format, one line like every
        # event.
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
