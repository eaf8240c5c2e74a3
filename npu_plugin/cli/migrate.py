"""The `npu-plugin migrate` sub-command, its flags declared in cli.py: read the input, write the
output atomically."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING

from npu_plugin.errors import MigrateError
from npu_plugin.host.atomic import write_atomic
from npu_plugin.migrate.options import KNOWN_RESOURCE_NAMES, STDIO, Options

if TYPE_CHECKING:
    from npu_plugin.migrate.transform import Result

SUFFIXES = (".yaml", ".yml", ".json")
HELM_CHART = "Chart.yaml"  # a directory holding it is a Helm chart: templates, not manifests
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_LEFT_BEHIND = 0, 1, 2, 3
_PROG = "npu-plugin migrate"


class _UsageError(Exception):
    """Flags that do not fit together (exit 2)."""


@dataclass(frozen=True, slots=True)
class _Job:
    """One input to migrate and where its result goes (None: nowhere, as with --check)."""

    source: Path | None  # None: stdin
    target: Path | None
    to_stdout: bool = False
    only_if_changed: bool = False
    make_parents: bool = False  # a file of a migrated copy of a directory
    of_tree: bool = False  # found below -f DIR: an error skips it instead of stopping the run
    chart: bool = False  # a Helm chart below -f DIR, skipped whole

    @property
    def name(self) -> str:
        return "<stdin>" if self.source is None else str(self.source)


def run(args: argparse.Namespace) -> int:
    """Migrate the input; 0 done, 1 error (or something to do, with --check), 2 bad flags, 3 left
    behind."""
    try:
        options = _options(args)
        jobs = _jobs(args)
    except _UsageError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    try:
        results, failed = _migrate(jobs, options)
    except MigrateError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    done = [result for _, _, result in results]
    for result in done:
        for warning in (*result.warnings, *result.unresolved, *result.left_behind):
            print(f"{_PROG}: warning: {warning}", file=sys.stderr)
    for warning in _unmatched(done, options, explicit=args.resource_name is not None):
        print(f"{_PROG}: warning: {warning}", file=sys.stderr)
    left = any(result.left_behind for result in done)
    unresolved = any(result.unresolved for result in done)
    if args.check:
        for result in done:
            for change in result.changes:
                print(f"would migrate {change}")
        print(f"{_PROG}: {_summary(done, 'would migrate', failed)}", file=sys.stderr)
        return EXIT_FAILED if failed or left or unresolved or any(result.changes for result in done) else EXIT_OK
    try:
        for job, text, result in results:
            _write(job, text, result.text)
    except MigrateError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{_PROG}: {_summary(done, 'migrated', failed)}", file=sys.stderr)
    return EXIT_FAILED if failed else EXIT_LEFT_BEHIND if left else EXIT_OK


def _migrate(jobs: list[_Job], options: Options) -> tuple[list[tuple[_Job, str, Result]], int]:
    """Each job's input and result, and how many files of a tree were skipped for errors (each said
    on stderr). MigrateError for an input that is not part of a tree."""
    from npu_plugin.migrate.transform import migrate_json, migrate_text

    results: list[tuple[_Job, str, Result]] = []
    failed = 0
    for job in jobs:
        try:
            if job.chart:
                raise MigrateError(
                    f"{job.name}: a Helm chart ({HELM_CHART}), whose templates are not manifests; skipped: migrate "
                    f"what it renders (helm template RELEASE {job.name} | {_PROG}), or leave it out with --exclude"
                )
            text = _read(job.source)
            migrate = migrate_json if job.source is not None and job.source.suffix == ".json" else migrate_text
            results.append((job, text, migrate(text, options, job.name)))
        except MigrateError as error:
            if not job.of_tree:
                raise
            print(f"{_PROG}: error: {error}{'' if job.chart else '; file skipped'}", file=sys.stderr)
            failed += 1
    return results, failed


def _options(args: argparse.Namespace) -> Options:
    names = tuple(dict.fromkeys(args.resource_name or KNOWN_RESOURCE_NAMES))
    return Options(names, args.device_class, args.same_topology_group, shared_device_class=args.shared_device_class)


def _jobs(args: argparse.Namespace) -> list[_Job]:
    source, output, in_place = args.filename, args.output, args.in_place
    if in_place and output is not None:
        raise _UsageError("--in-place and -o exclude each other")
    if args.exclude and (source == STDIO or not Path(source).is_dir()):
        raise _UsageError("--exclude needs -f DIR")
    if source == STDIO:
        if in_place:
            raise _UsageError("--in-place needs -f FILE or -f DIR, not stdin")
        return [_single(None, output, args.check)]
    path = Path(source)
    if not path.is_dir():
        return [
            _Job(path, path, only_if_changed=True) if in_place and not args.check else _single(path, output, args.check)
        ]
    found = _manifests(path, args.exclude or ())
    charts = [_Job(chart, None, of_tree=True, chart=True) for chart in found.charts]
    if args.check:
        return _by_path([_Job(file, None, of_tree=True) for file in found.files], charts)
    if in_place:
        return _by_path([_Job(file, file, only_if_changed=True, of_tree=True) for file in found.files], charts)
    if output is None or output == STDIO:
        raise _UsageError(f"-f {source} is a directory: give --in-place, or -o DIR for a migrated copy of it")
    target = Path(output)
    if target.exists() and not target.is_dir():
        raise _UsageError(f"-o {output} must be a directory when -f names one")
    copies = [_Job(file, target / file.relative_to(path), make_parents=True, of_tree=True) for file in found.files]
    return _by_path(copies, charts)


def _by_path(*jobs: list[_Job]) -> list[_Job]:
    return sorted((job for some in jobs for job in some), key=lambda job: str(job.source))


def _single(source: Path | None, output: str | None, check: bool) -> _Job:
    if check:
        return _Job(source, None)
    if output is None or output == STDIO:
        return _Job(source, None, to_stdout=True)
    return _Job(source, Path(output))


@dataclass(frozen=True, slots=True)
class _Found:
    files: list[Path]
    charts: list[Path]


def _manifests(directory: Path, excludes: Sequence[str]) -> _Found:
    """Every manifest below `directory`, and every Helm chart instead of its files. Hidden files and
    directories (.git) are left out, and so is what an exclude glob matches: the path below
    `directory`, or the name."""
    found = _Found([], [])
    pending = [directory]
    while pending:
        folder = pending.pop()
        if (folder / HELM_CHART).is_file():
            found.charts.append(folder)
            continue
        for path in folder.iterdir():
            below = path.relative_to(directory).as_posix()
            if path.name.startswith(".") or any(fnmatchcase(below, g) or fnmatchcase(path.name, g) for g in excludes):
                continue
            if path.is_dir() and not path.is_symlink():
                pending.append(path)
            elif path.suffix in SUFFIXES and path.is_file():
                found.files.append(path)
    return found


def _unmatched(results: list[Result], options: Options, *, explicit: bool) -> list[str]:
    """A --resource-name that matched nothing, with the Ascend names the input does ask for."""
    matched = frozenset().union(*(result.matched for result in results))
    seen = sorted(frozenset().union(*(result.seen for result in results)) - matched)
    if explicit:
        found = f"found: {', '.join(seen)}" if seen else "found no Ascend resource"
        return [
            f"--resource-name {name} matches nothing; {found}" for name in options.resource_names if name not in matched
        ]
    if not matched and seen:
        return [
            f"no container asks for {', '.join(options.resource_names)}; the input asks for {', '.join(seen)}: "
            "choose with --resource-name"
        ]
    return []


def _summary(results: list[Result], verb: str, failed: int) -> str:
    containers = sum(len(result.changes) for result in results)
    workloads = sum(result.workloads for result in results)
    skipped = sum(result.skipped for result in results)
    line = f"{verb} {containers} container{_s(containers)} in {workloads} workload{_s(workloads)}"
    line = f"{line}, skipped {skipped} (see above)" if skipped else line
    return f"{line}; {failed} skipped for errors (see above)" if failed else line


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _read(source: Path | None) -> str:
    name = "<stdin>" if source is None else str(source)
    try:
        data = sys.stdin.buffer.read() if source is None else source.read_bytes()
    except OSError as error:
        raise MigrateError(f"cannot read {name}: {error.strerror or error}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        where = f"{name}:{line}: document {_document_at(data, error.start)}"
        raise MigrateError(f"{where}: not UTF-8 text (invalid byte at offset {error.start})") from None


def _document_at(data: bytes, offset: int) -> int:
    """The 1-based number of the document holding byte `offset`, counting its `---` starts."""
    from npu_plugin.migrate.yamlstream import split_documents

    return max(1, len(split_documents(data[: offset + 1].decode("utf-8", errors="replace"))))


def _write(job: _Job, before: str, text: str) -> None:
    if job.to_stdout:
        _write_stdout(text)
        return
    if job.target is None or (job.only_if_changed and text == before):
        return
    path = job.target.resolve()  # replace a symlink's target, not the link
    try:
        if job.make_parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, text.encode("utf-8"), _mode(path))
    except OSError as error:
        raise MigrateError(f"cannot write {job.target}: {error.strerror or error}") from None


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
