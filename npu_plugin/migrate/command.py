"""The `npu-plugin migrate` sub-command: flags, reading the input, writing the output atomically."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from npu_plugin.atomic import write_atomic
from npu_plugin.config import DNS_SUBDOMAIN, RESOURCE_NAME, matching
from npu_plugin.errors import MigrateError
from npu_plugin.migrate.options import DEFAULT_DEVICE_CLASS, DEFAULT_RESOURCE_NAME, Options

if TYPE_CHECKING:
    from npu_plugin.migrate.transform import Result

STDIO = "-"
_PROG = "npu-plugin migrate"


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `migrate` and its flags."""
    parser = subparsers.add_parser(
        "migrate",
        help="rewrite workloads from NPU extended-resource limits to DRA claims",
        description="Rewrite workloads asking resources.limits[RESOURCE] into ResourceClaimTemplates and claims.",
    )
    parser.add_argument(
        "-f", "--filename", default=STDIO, metavar="FILE", help="manifest stream to read; - for stdin (default)"
    )
    parser.add_argument(
        "-o",
        "--output",
        default=STDIO,
        metavar="FILE",
        help="where to write the result, replaced atomically; - for stdout (default)",
    )
    parser.add_argument(
        "--resource-name",
        default=DEFAULT_RESOURCE_NAME,
        type=matching(RESOURCE_NAME, "an extended resource name like huawei.com/Ascend910"),
        help=f"extended resource to migrate (default {DEFAULT_RESOURCE_NAME})",
    )
    parser.add_argument(
        "--device-class",
        default=DEFAULT_DEVICE_CLASS,
        type=matching(DNS_SUBDOMAIN, "a DeviceClass name (a DNS subdomain)"),
        help=f"DeviceClass the generated claims ask for (default {DEFAULT_DEVICE_CLASS})",
    )
    parser.add_argument(
        "--same-topology-group",
        action="store_true",
        help="claims for more than one NPU must come from one HCCS topology group",
    )
    parser.add_argument(
        "--check", action="store_true", help="write nothing; list what would change and exit 1 if anything would"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Migrate `args.filename` to `args.output`; 0 on success (or nothing to change with --check), else 1."""
    from npu_plugin.migrate.transform import migrate_text

    options = Options(args.resource_name, args.device_class, args.same_topology_group)
    try:
        result = migrate_text(_read(args.filename), options, _source(args.filename))
    except MigrateError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 1
    for warning in result.warnings:
        print(f"{_PROG}: warning: {warning}", file=sys.stderr)
    if args.check:
        return _report(result)
    try:
        _write(args.output, result.text)
    except MigrateError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 1
    return 0


def _report(result: Result) -> int:
    for change in result.changes:
        print(f"would migrate {change}")
    return 1 if result.changes else 0


def _source(filename: str) -> str:
    return "<stdin>" if filename == STDIO else filename


def _read(filename: str) -> str:
    try:
        data = sys.stdin.buffer.read() if filename == STDIO else Path(filename).read_bytes()
    except OSError as error:
        raise MigrateError(f"cannot read {filename}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise MigrateError(f"{_source(filename)}: not UTF-8 text (invalid byte at offset {error.start})") from None


def _write(output: str, text: str) -> None:
    if output == STDIO:
        _write_stdout(text)
        return
    path = Path(output).resolve()  # replace a symlink's target, not the link
    data = text.encode("utf-8")
    try:
        write_atomic(path, data, _mode(path))
    except OSError as error:
        raise MigrateError(f"cannot write {output}: {error.strerror or error}") from None


def _write_stdout(text: str) -> None:
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:
        sys.stdout.write(text)
        return
    # Bytes, so the input's line endings come out exactly as they went in.
    sys.stdout.flush()
    binary.write(text.encode("utf-8"))
    binary.flush()


def _mode(path: Path) -> int:
    """Keep the permissions of a file being replaced; a new file gets what the umask allows."""
    try:
        return path.stat().st_mode & 0o7777
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
