"""migrate's edits made on the user's own lines, at the positions the YAML parser recorded (pure).

Block-style YAML is edited line by line: an NPU entry's lines are deleted, `claims:` and
`resourceClaims:` lines are inserted with the indentation of their neighbours. Every other line
keeps its bytes. An edit inside a flow collection (`{...}`, `[...]`) re-renders the outermost flow
collection around it, after the data has been edited, and splices it in where the old one stood.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap, CommentedSeq

from npu_plugin.migrate.claims import SECTIONS, ContainerClaim
from npu_plugin.migrate.workloads import Workload, key_line
from npu_plugin.migrate.yamlstream import block_scalar_lines, dump_flow, lines


@dataclass(frozen=True, slots=True)
class _SequenceStyle:
    """How block sequences are laid out: dash column after the parent key, item content after the
    dash."""

    offset: int = 0  # kubectl's style, for a pod spec with no block sequence to copy
    gap: int = 2


@dataclass
class LineEdits:
    """Edits planned on `text` (the last line terminated) before the data changes; new lines end in
    `newline`.

    `open_end`: the document's last line had no line break (the caller added one and takes it off
    again).
    """

    text: str
    data: Any
    newline: str = "\n"
    open_end: bool = False
    _lines: list[str] = field(init=False)
    _scalar: frozenset[int] = field(init=False)  # lines inside block scalars: content, whatever they look like
    _scalar_at_end: bool = field(init=False)  # lines added at the end would join the value of a block scalar
    _flow_root: dict[int, Any] = field(init=False, default_factory=dict)
    _deleted: set[int] = field(init=False, default_factory=set)
    _inserted: dict[int, list[str]] = field(init=False, default_factory=dict)  # before line k
    _rerender: dict[int, Any] = field(init=False, default_factory=dict)  # id -> flow root to re-render

    def __post_init__(self) -> None:
        self._lines = lines(self.text)
        self._scalar = block_scalar_lines(self.text)
        self._scalar_at_end = self.open_end and len(self._lines) - 1 in self._scalar
        self._index_flow(self.data, None)

    def _index_flow(self, node: Any, root: Any) -> None:
        if not isinstance(node, CommentedMap | CommentedSeq):
            return
        if root is None and node.fa.flow_style():
            root = node
        if root is not None:
            self._flow_root[id(node)] = root
        for child in node.values() if isinstance(node, CommentedMap) else node:
            self._index_flow(child, root)

    def plan(self, workload: Workload, planned: Sequence[ContainerClaim]) -> None:
        """Record the line edits `claims.apply(workload, planned)` is about to make to the data."""
        style = self._sequence_style(workload.pod_spec)
        for container in _unique(item.container.node for item in planned):
            mine = [item for item in planned if item.container.node is container]
            self._container(container, mine, style)
        claimed = [item for item in planned if item.own_claim]
        if claimed:
            self._pod_claims(workload.pod_spec, claimed, style)

    def _container(self, container: CommentedMap, items: list[ContainerClaim], style: _SequenceStyle) -> None:
        resources: CommentedMap = container["resources"]
        if self._in_flow(resources):
            return
        removed = {resource for item in items for resource in item.removed}
        emptied = 0
        for section in SECTIONS:
            entries = resources.get(section)
            if not isinstance(entries, CommentedMap) or not removed & set(entries):
                continue
            if set(entries) <= removed:
                self._delete_entry(resources, section)
                emptied += 1
            elif not self._in_flow(entries):
                for resource in removed & set(entries):
                    self._delete_entry(entries, resource)
        claims = [item.claim for item in items if item.count]
        if claims:
            self._append(resources, "claims", [[f"name: {claim}"] for claim in claims], style)
        elif emptied == len(resources):
            self._delete_entry(container, "resources")

    def _pod_claims(self, pod_spec: CommentedMap, items: list[ContainerClaim], style: _SequenceStyle) -> None:
        if self._in_flow(pod_spec):
            return
        entries = [[f"name: {item.claim}", f"resourceClaimTemplateName: {item.template}"] for item in items]
        self._append(pod_spec, "resourceClaims", entries, style, after=("initContainers", "containers"))

    def _append(
        self,
        parent: CommentedMap,
        key: str,
        entries: list[list[str]],
        style: _SequenceStyle,
        after: tuple[str, ...] = (),
    ) -> None:
        """Add `entries` (each a mapping's lines) to the block sequence `parent[key]`, creating it
        if needed."""
        existing = parent.get(key)
        if isinstance(existing, CommentedSeq) and existing:
            if self._in_flow(existing):
                self._rerender[id(self._flow_root[id(existing)])] = self._flow_root[id(existing)]
                return
            dash = self._dash_column(existing)
            gap = int(existing.lc.item(0)[1]) - dash
            self._insert(self._end(existing.lc.line, dash + 1), _items(entries, dash, gap))
            return
        indent = int(parent.lc.col)
        new = [" " * indent + f"{key}:\n", *_items(entries, indent + style.offset, style.gap)]
        if existing is not None:  # `key: []` or `key:` with nothing: replace that line
            line = key_line(parent, key)
            self._deleted.add(line)
            self._insert(line, new)
            return
        following = _next_key(parent, after)
        at = self._before(key_line(parent, following), indent) if following is not None else None
        if at is None:
            at = self._end(parent.lc.line, indent)
        if at == len(self._lines) and self._scalar_at_end:
            # After a block scalar that ends the file without a line break, new lines would become
            # part of its value (or need `|-`): the new key goes first instead, before the ones it
            # normally follows.
            first = next(key for key in (*after, *parent) if key in parent)
            at = self._before(key_line(parent, first), indent)
        self._insert(at, new)

    def _delete_entry(self, mapping: CommentedMap, key: Any) -> None:
        """Delete a block mapping entry's content lines; comments and blank lines among them
        stay."""
        if self._in_flow(mapping):
            return
        line, column = mapping.lc.key(key)
        self._deleted.update(n for n in range(line, self._end(line, column + 1)) if not self._remark(n))

    def _in_flow(self, node: Any) -> bool:
        """Whether `node` sits in a flow collection; if so, that collection is scheduled for
        re-rendering."""
        root = self._flow_root.get(id(node))
        if root is None:
            return False
        self._rerender[id(root)] = root
        return True

    def _end(self, start: int, indent: int) -> int:
        """The line after the last content line, from `start` on, that belongs to a block indented
        >= `indent`."""
        end = start + 1
        for number in range(start + 1, len(self._lines)):
            text = self._lines[number]
            if number in self._scalar:
                end = number + 1
                continue
            if _is_remark(text):
                continue
            if _indent(text) < indent:
                break
            end = number + 1
        return end

    def _before(self, line: int, indent: int) -> int:
        """Above the blank lines and comments (at `indent` or less) that lead into `line`."""
        while line > 0 and self._remark(line - 1) and _indent(self._lines[line - 1]) <= indent:
            line -= 1
        return line

    def _remark(self, line: int) -> bool:
        """A blank or comment line, not inside a block scalar."""
        return line not in self._scalar and _is_remark(self._lines[line])

    def _dash_column(self, sequence: CommentedSeq) -> int:
        line, column = sequence.lc.item(0)
        text = self._lines[line]
        dash = text.rfind("-", 0, column)
        return dash if dash >= 0 else int(sequence.lc.col)

    def _sequence_style(self, pod_spec: CommentedMap) -> _SequenceStyle:
        """The layout of this pod spec's block sequences (its containers' first), else kubectl's."""
        for key in ("containers", "initContainers", "volumes"):
            value = pod_spec.get(key)
            if isinstance(value, CommentedSeq) and value and not value.fa.flow_style():
                dash = self._dash_column(value)
                gap = int(value.lc.item(0)[1]) - dash
                return _SequenceStyle(max(0, dash - int(pod_spec.lc.key(key)[1])), gap if gap >= 2 else 2)
        return _SequenceStyle()

    def _insert(self, line: int, new: list[str]) -> None:
        self._inserted.setdefault(line, []).extend(text.replace("\n", self.newline) for text in new)

    def render(self) -> str | None:
        """The text after the data has been edited (planned lines, flow collections re-rendered).

        None when a flow collection's end cannot be found in the text: the caller renders another
        way.
        """
        splices = {int(root.lc.line): root for root in self._rerender.values()}
        out: list[str] = []
        skip_to = -1
        for number, text in enumerate(self._lines):
            out += self._inserted.get(number, [])
            if number < skip_to or number in self._deleted:
                continue
            if number in splices:
                spliced = self._splice(splices[number])
                if spliced is None:
                    return None
                line, skip_to = spliced
                out.append(line)
                continue
            out.append(text)
        out += self._inserted.get(len(self._lines), [])
        return "".join(out)

    def _splice(self, root: Any) -> tuple[str, int] | None:
        """The line holding `root` re-rendered, and the line after the old rendering ends."""
        line, column = int(root.lc.line), int(root.lc.col)
        end = flow_end(self._lines, line, column)
        if end is None:
            return None
        end_line, end_column = end
        text = self._lines[line][:column] + dump_flow(root) + self._lines[end_line][end_column:]
        return text, end_line + 1


def flow_end(text_lines: list[str], line: int, column: int) -> tuple[int, int] | None:
    """(line, column just past) the flow collection opening at (`line`, `column`); quotes
    respected."""
    depth = 0
    quote = ""
    for number in range(line, len(text_lines)):
        text = text_lines[number]
        position = column if number == line else 0
        while position < len(text):
            char = text[position]
            if quote:
                if char == "\\" and quote == '"':
                    position += 1
                elif char == quote:
                    if quote == "'" and text[position + 1 : position + 2] == "'":
                        position += 1
                    else:
                        quote = ""
            elif char in "'\"" and (position == 0 or text[position - 1] in " \t[{,:"):
                quote = char
            elif char == "#" and (position == 0 or text[position - 1] in " \t"):
                break
            elif char in "[{":
                depth += 1
            elif char in "]}":
                depth -= 1
                if depth == 0:
                    return number, position + 1
            position += 1
    return None


def _items(entries: list[list[str]], dash: int, gap: int) -> list[str]:
    """Block sequence items, each a mapping given as its lines, the dash at `dash`, content `gap`
    further."""
    gap = max(gap, 2)
    made: list[str] = []
    for entry in entries:
        first, *rest = entry
        made.append(" " * dash + "-" + " " * (gap - 1) + f"{first}\n")
        made += [" " * (dash + gap) + f"{more}\n" for more in rest]
    return made


def _next_key(parent: CommentedMap, after: tuple[str, ...]) -> Any:
    """The key following the last of `after` in `parent` (None when that is the last key, or none is
    there)."""
    keys = list(parent)
    positions = [keys.index(key) for key in after if key in parent]
    if not positions:
        return None
    following = max(positions) + 1
    return keys[following] if following < len(keys) else None


def _unique(nodes: Iterable[CommentedMap]) -> list[CommentedMap]:
    seen: dict[int, CommentedMap] = {}
    for node in nodes:
        seen.setdefault(id(node), node)
    return list(seen.values())


def _is_remark(text: str) -> bool:
    stripped = text.strip()
    return not stripped or stripped.startswith("#")


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" "))
