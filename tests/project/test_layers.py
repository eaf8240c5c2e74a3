"""The layer table in docs/architecture.md is the rule, and this test reads it from the document
itself.

Under a second heading, rows of packages that must never import each other (`deviceplugin/` and
`dra/`, say) are checked the same way.

Every module of `npu_plugin/` belongs to exactly one layer; a module imports only from its own layer
and the ones listed above it, and no import cycle joins `npu_plugin` modules. Every `import`
statement counts wherever it stands: at the top, inside a function (a lazy import is still a
dependency), or under `if TYPE_CHECKING:` (a type named in a signature is a dependency too). An
`__init__.py` with nothing but a docstring holds no code and needs no row.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "npu_plugin"
HEADING = "## Layers"
INDEPENDENCE_HEADING = "## Independent packages"


@dataclass(frozen=True)
class Layer:
    rank: int
    name: str
    entries: tuple[str, ...]


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


@dataclass(frozen=True)
class Findings:
    table: list[str]
    upward: list[str]
    cycles: list[list[str]]


def check(root: Path, markdown: str) -> Findings:
    """Check the package under `root` against the layer table in `markdown`."""
    modules = package_modules(root)
    placed, table_problems = assign_layers(layer_table(markdown), modules, root)
    edges = sorted({edge for name, path in modules.items() for edge in imports_of(name, path, modules)}, key=str)
    upward = [
        f"{modules[edge.importer].relative_to(root)}:{edge.line}: {edge.importer} "
        f"(layer {placed[edge.importer].name!r}) imports {edge.imported} (layer {placed[edge.imported].name!r}); "
        "a module imports only from its own layer and the ones above it in the table"
        for edge in edges
        if edge.importer in placed
        and edge.imported in placed
        and placed[edge.imported].rank > placed[edge.importer].rank
    ]
    return Findings(table_problems, upward, find_cycles(edges))


def module_name(path: Path, root: Path) -> str:
    """`root/npu_plugin/dra/slices.py` → `npu_plugin.dra.slices`; an `__init__.py` names its
    package."""
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def holds_code(path: Path) -> bool:
    body = ast.parse(path.read_text(encoding="utf-8")).body
    has_docstring = bool(body) and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    return len(body) > int(has_docstring)


def package_modules(root: Path) -> dict[str, Path]:
    """Every module of the package under `root`, by dotted name."""
    return {module_name(path, root): path for path in sorted((root / PACKAGE).rglob("*.py"))}


def layer_table(markdown: str) -> list[Layer]:
    """The rows of the table under the "Layers" heading, top row first: the first cell names the
    layer, the second lists its modules as backticked paths under `npu_plugin/` (`a/{b,c}.py`
    expands to two files; `dir/` is everything under it; text in parentheses is a remark)."""
    rows = table_rows(markdown, HEADING)
    layers = [Layer(rank, row[0], entries_in(row[1])) for rank, row in enumerate(rows)]
    if not layers:
        raise ValueError(f"the {HEADING!r} section of the architecture document has no table rows")
    return layers


def table_rows(markdown: str, heading: str) -> list[list[str]]:
    """The cells of each row of the first table under `heading`, header and rule left out."""
    lines = markdown.splitlines()
    starts = [index for index, line in enumerate(lines) if line.startswith(heading)]
    if not starts:
        raise ValueError(f"the architecture document has no {heading!r} section")
    rows: list[list[str]] = []
    for line in lines[starts[0] + 1 :]:
        if line.startswith("#") or (rows and not line.startswith("|")):
            break
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows[2:]


def independence_rows(markdown: str) -> list[tuple[str, ...]]:
    """The rows under the "Independent packages" heading: each names packages (`dir/`) that never
    import each other."""
    return [entries_in(row[0]) for row in table_rows(markdown, INDEPENDENCE_HEADING)]


def crossings(root: Path, markdown: str) -> list[str]:
    """Imports between packages that a row of the independence table keeps apart, and entries naming
    no package."""
    modules = package_modules(root)
    relative = {name: path.relative_to(root / PACKAGE).as_posix() for name, path in modules.items()}
    problems, rows = [], []
    for row in independence_rows(markdown):
        named = tuple(e for e in row if e.endswith("/") and any(covers(e, path) for path in relative.values()))
        problems += [f"independence row lists `{e}`, which is no package of {PACKAGE}/" for e in row if e not in named]
        rows.append(named)
    for name, path in modules.items():
        for edge in imports_of(name, path, modules):
            for row in rows:
                mine = [entry for entry in row if covers(entry, relative[edge.importer])]
                theirs = [entry for entry in row if covers(entry, relative[edge.imported])]
                if mine and theirs and set(mine).isdisjoint(theirs):
                    problems.append(
                        f"{path.relative_to(root)}:{edge.line}: {edge.importer} ({mine[0]}) imports "
                        f"{edge.imported} ({theirs[0]}); these packages never import each other"
                    )
    return problems


def entries_in(cell: str) -> tuple[str, ...]:
    without_remarks = re.sub(r"\([^()]*\)", "", cell)
    return tuple(entry for token in re.findall(r"`([^`]+)`", without_remarks) for entry in expand(token))


def expand(token: str) -> list[str]:
    """`migrate/{claims,command}.py` → `migrate/claims.py`, `migrate/command.py`."""
    match = re.fullmatch(r"([^{}]*)\{([^{}]+)\}([^{}]*)", token)
    if match is None:
        return [token]
    head, alternatives, tail = match.groups()
    return [f"{head}{alternative.strip()}{tail}" for alternative in alternatives.split(",")]


def assign_layers(layers: list[Layer], modules: Mapping[str, Path], root: Path) -> tuple[dict[str, Layer], list[str]]:
    """Each module's layer, and what is wrong with the table: entries naming nothing, modules in two
    rows or in none."""
    problems = []
    placed: dict[str, Layer] = {}
    relative = {name: path.relative_to(root / PACKAGE).as_posix() for name, path in modules.items()}
    for layer in layers:
        for entry in layer.entries:
            if not entry.endswith((".py", "/")):
                problems.append(f"layer {layer.name!r} lists `{entry}`: an entry is `file.py` or `directory/`")
                continue
            matched = [name for name, path in relative.items() if covers(entry, path)]
            if not matched:
                problems.append(f"layer {layer.name!r} lists `{entry}`, which is no module of {PACKAGE}/")
            for name in matched:
                if name in placed and placed[name] != layer:
                    problems.append(f"{name} is in two layers: {placed[name].name!r} and {layer.name!r}")
                placed.setdefault(name, layer)
    problems += [
        f"{name} is in no layer: add `{relative[name]}` to the table in section {HEADING!r} of docs/architecture.md"
        for name, path in modules.items()
        if name not in placed and (path.name != "__init__.py" or holds_code(path))
    ]
    return placed, problems


def covers(entry: str, relative_path: str) -> bool:
    return relative_path.startswith(entry) if entry.endswith("/") else relative_path == entry


def imports_of(name: str, path: Path, modules: Mapping[str, Path]) -> Iterator[Import]:
    """The other `npu_plugin` modules that the module `name` at `path` imports, anywhere in its
    body."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute(node.module, node.level, package)
            targets = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            imported = nearest_module(target, modules)
            if imported is not None and imported != name:
                yield Import(name, imported, node.lineno)


def absolute(module: str | None, level: int, package: str) -> str:
    """The absolute name behind `from {'.' * level}{module} import ...` written inside `package`."""
    if level == 0:
        return module or ""
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{module}" if module else base


def nearest_module(dotted: str, modules: Mapping[str, Path]) -> str | None:
    """The module a dotted name lives in (`npu_plugin.dra.slices.build` → `npu_plugin.dra.slices`);
    None outside the package."""
    parts = dotted.split(".")
    if parts[0] != PACKAGE:
        return None
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def find_cycles(edges: Iterable[Import]) -> list[list[str]]:
    """One cycle, as a path back to its start, for each group of modules that import each other."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.importer, set()).add(edge.imported)
        graph.setdefault(edge.imported, set())
    return [shortest_cycle(min(group), group, graph) for group in strongly_connected(graph) if len(group) > 1]


def strongly_connected(graph: Mapping[str, set[str]]) -> list[set[str]]:
    """Tarjan's algorithm, iterative so that a long import chain cannot reach the recursion
    limit."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)

    for start in sorted(graph):
        if start in index:
            continue
        visit(start)
        work = [(start, iter(sorted(graph[start])))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    cut = stack.index(node)
                    groups.append(set(stack[cut:]))
                    del stack[cut:]
            elif child not in index:
                visit(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in stack:
                low[node] = min(low[node], index[child])
    return groups


def shortest_cycle(start: str, group: set[str], graph: Mapping[str, set[str]]) -> list[str]:
    """The shortest import path from `start` back to `start` inside `group` (breadth first)."""
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & group):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if child not in came_from:
                    came_from[child] = node
                    following.append(child)
        frontier = following
    raise AssertionError(f"{start} is in a strongly connected group but on no cycle")


def architecture() -> str:
    return (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")


def test_every_module_of_the_package_is_in_exactly_one_layer() -> None:
    problems = check(REPO, architecture()).table
    assert not problems, "the layer table in docs/architecture.md is out of date:\n" + "\n".join(problems)


def test_modules_import_only_from_their_own_layer_or_the_ones_above_it() -> None:
    upward = check(REPO, architecture()).upward
    assert not upward, "imports reach up the layer table:\n" + "\n".join(upward)


def test_independent_packages_never_import_each_other() -> None:
    problems = crossings(REPO, architecture())
    assert not problems, "imports between independent packages:\n" + "\n".join(problems)


def test_no_import_cycle_joins_modules_of_the_package() -> None:
    cycles = check(REPO, architecture()).cycles
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


TABLE = """
# Architecture

## Layers

| layer | modules | notes |
|---|---|---|
| records | `device.py`, `__init__.py` (remarks like `this` are prose) | `not/a/module` is prose here |
| logic | `a/{one,two}.py`, `b/` | |
| top | `cli.py` | |

## After
| other | `nothing.py` | a later table is not read |

## Independent packages

| packages | why |
|---|---|
| `a/`, `b/` | |
"""


def write_package(root: Path, files: Mapping[str, str]) -> Path:
    for relative, text in {"__init__.py": "", **files}.items():
        path = root / PACKAGE / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


LAYERED = {
    "device.py": "",
    "b/__init__.py": '"""Another package."""\n',
    "b/one.py": "from npu_plugin import device\n",
    "a/__init__.py": '"""A package whose __init__ holds only a docstring needs no row."""\n',
    "a/one.py": "from npu_plugin import device\n",
    "a/two.py": "from . import one\nfrom .one import something\n",
    "cli.py": "import npu_plugin.a.two\nfrom npu_plugin.a.one import device\n",
}


def test_a_package_that_follows_its_table_passes(tmp_path: Path) -> None:
    assert check(write_package(tmp_path, LAYERED), TABLE) == Findings([], [], [])


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        (
            {"a/three.py": ""},
            "npu_plugin.a.three is in no layer: add `a/three.py` to the table in section '## Layers' of "
            "docs/architecture.md",
        ),
        ({"a/__init__.py": "X = 1\n"}, "npu_plugin.a is in no layer: add `a/__init__.py`"),
        ({"cli.py": None}, "layer 'top' lists `cli.py`, which is no module of npu_plugin/"),
    ],
    ids=["new module", "package init with code", "listed module removed"],
)
def test_the_table_must_name_each_module_once(tmp_path: Path, files: dict[str, str | None], problem: str) -> None:
    write_package(tmp_path, {name: text for name, text in {**LAYERED, **files}.items() if text is not None})
    problems = check(tmp_path, TABLE).table
    assert len(problems) == 1 and problems[0].startswith(problem), problems


def test_a_module_listed_in_two_layers_is_reported(tmp_path: Path) -> None:
    table = TABLE.replace("| `cli.py` |", "| `cli.py`, `a/` |")
    problems = check(write_package(tmp_path, LAYERED), table).table
    assert problems == [
        "npu_plugin.a.one is in two layers: 'logic' and 'top'",
        "npu_plugin.a.two is in two layers: 'logic' and 'top'",
    ]


@pytest.mark.parametrize(
    ("source", "line"),
    [
        ("from npu_plugin import cli\n", 1),
        ("import npu_plugin.cli\n", 1),
        ("from .. import cli\n", 1),
        ("def later():\n    from npu_plugin.cli import main\n", 2),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from npu_plugin.cli import Main\n", 3),
    ],
    ids=["from package", "import dotted", "relative", "lazy inside a function", "TYPE_CHECKING"],
)
def test_every_kind_of_import_up_the_table_is_reported(tmp_path: Path, source: str, line: int) -> None:
    write_package(tmp_path, {**LAYERED, "a/one.py": source})
    findings = check(tmp_path, TABLE)
    assert findings.upward == [
        f"npu_plugin/a/one.py:{line}: npu_plugin.a.one (layer 'logic') imports npu_plugin.cli (layer 'top'); "
        "a module imports only from its own layer and the ones above it in the table"
    ]


def test_an_import_cycle_inside_one_layer_is_reported_as_a_path(tmp_path: Path) -> None:
    write_package(tmp_path, {**LAYERED, "a/one.py": "def later():\n    from npu_plugin.a import two\n"})
    findings = check(tmp_path, TABLE)
    assert (findings.upward, findings.cycles) == ([], [["npu_plugin.a.one", "npu_plugin.a.two", "npu_plugin.a.one"]])


def test_a_document_without_the_layers_table_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no '## Layers' section"):
        check(write_package(tmp_path, LAYERED), "# Architecture\n")


def test_a_package_importing_an_independent_one_is_reported(tmp_path: Path) -> None:
    write_package(tmp_path, {**LAYERED, "b/one.py": "def later():\n    from npu_plugin.a import one\n"})
    assert crossings(tmp_path, TABLE) == [
        "npu_plugin/b/one.py:2: npu_plugin.b.one (b/) imports npu_plugin.a.one (a/); these packages never import "
        "each other"
    ]
    assert crossings(write_package(tmp_path, LAYERED), TABLE) == []


def test_an_independence_entry_naming_no_package_is_reported(tmp_path: Path) -> None:
    table = TABLE.replace("| `a/`, `b/` |", "| `a/`, `c/`, `device.py` |")
    assert crossings(write_package(tmp_path, LAYERED), table) == [
        "independence row lists `c/`, which is no package of npu_plugin/",
        "independence row lists `device.py`, which is no package of npu_plugin/",
    ]
