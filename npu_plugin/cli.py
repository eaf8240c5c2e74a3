"""The `npu-plugin` command: parse, validate, dispatch; the only place exit codes are decided."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from npu_plugin import __version__
from npu_plugin.config import (
    MODES,
    add_backend_flags,
    add_log_flags,
    add_serve_flags,
    env_arguments,
)
from npu_plugin.errors import ConfigError, NpuPluginError

EXIT_OK, EXIT_FAILURE, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad flag as one line and exits 2, without the usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="npu-plugin", description="Huawei Ascend NPUs for Kubernetes: Device Plugin and DRA.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    serve = commands.add_parser("serve", help="run the daemon")
    add_serve_flags(serve)
    serve.set_defaults(func=_serve)

    inventory = commands.add_parser("inventory", help="print what discovery finds")
    add_backend_flags(inventory)
    inventory.add_argument("--output", "-o", choices=("table", "json", "yaml", "resourceslice"), default="table")
    inventory.add_argument("--node-name")
    inventory.add_argument("--driver-name", default="npu.huawei.com")
    inventory.add_argument("--unhealthy-policy", choices=("remove", "taint"), default="remove")
    add_log_flags(inventory)
    inventory.set_defaults(func=_inventory)

    from npu_plugin.migrate.command import add_parser as add_migrate

    add_migrate(commands)  # type: ignore[arg-type]

    simulate = commands.add_parser("simulate", help="the whole flow on this machine, no cluster needed")
    simulate.add_argument("--mode", choices=MODES, default="both")
    add_backend_flags(simulate)
    simulate.set_defaults(backend="fake")
    simulate.add_argument("--dra-devices")
    add_log_flags(simulate)
    simulate.set_defaults(func=_simulate, log_level="error")

    version = commands.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _args: print(f"npu-plugin {__version__}") or EXIT_OK)
    return parser


def _serve(args: argparse.Namespace) -> int:
    from npu_plugin.config import config_from_args
    from npu_plugin.daemon import run_daemon

    return run_daemon(config_from_args(args))


def _inventory(args: argparse.Namespace) -> int:
    from npu_plugin.inventory_command import run_inventory

    return run_inventory(args)


def _simulate(args: argparse.Namespace) -> int:
    from npu_plugin.sim.walkthrough import run_simulation

    return run_simulation(args)


def parse_args(argv: Sequence[str], environ: dict[str, str] | None = None) -> argparse.Namespace:
    """Parse `argv` with environment twins applied; exits 2 on a bad flag or environment value."""
    parser = build_parser()
    environ = dict(os.environ) if environ is None else environ
    argv = list(argv)
    if not argv or (argv[0].startswith("-") and argv[0] not in ("-h", "--help")):
        # The image's CMD is `serve`; a DaemonSet that sets only `args:` (as the seed does) replaces it.
        argv.insert(0, "serve")
    command = next((a for a in argv if not a.startswith("-")), None)
    sub = _subparser(parser, command)
    if sub is not None:
        try:
            extra = env_arguments(sub, argv[argv.index(command) + 1 :], environ)  # type: ignore[arg-type]
        except ConfigError as error:
            parser.exit(EXIT_USAGE, f"npu-plugin {command}: error: {error}\n")
        argv += extra
    return parser.parse_args(argv)


def _subparser(parser: argparse.ArgumentParser, name: str | None) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction) and name in action.choices:
            return action.choices[name]  # type: ignore[no-any-return]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    from npu_plugin.logs import setup_logging

    if hasattr(args, "log_level"):
        setup_logging(args.log_level, args.log_format)
    try:
        return int(args.func(args))
    except ConfigError as error:
        _report(args, error)
        return EXIT_USAGE
    except NpuPluginError as error:
        _report(args, error)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except Exception:
        # A bug, not a user error: the traceback goes through the log format, one line like every event.
        logging.getLogger(__name__).critical(
            "npu-plugin %s stopped on an unexpected error", args.command, exc_info=True
        )
        return EXIT_FAILURE


def _report(args: argparse.Namespace, error: Exception) -> None:
    """An expected failure: one plain line, or one JSON event when machines read the log."""
    message = f"npu-plugin {args.command}: error: {error}"
    if getattr(args, "log_format", "text") == "json":
        logging.getLogger(__name__).error(message, extra={"error": str(error)})
    else:
        print(message, file=sys.stderr)
