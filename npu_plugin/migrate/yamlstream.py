"""A YAML stream as documents kept byte for byte, plus round-trip load, dump and style detection
(pure)."""

from __future__ import annotations

import io
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import ScalarEvent

from npu_plugin.errors import MigrateError

_START = re.compile(r"---(?=[ \t\r\n]|$)")
_END = re.compile(r"\.\.\.(?=[ \t\r\n]|$)")
# A marker line that carries nothing but an optional comment.
_BARE_MARKER = re.compile(r"(---|\.\.\.)[ \t]*(#.*)?\r?\n?$")
_WIDTH = 1 << 16  # never fold a long line the input did not fold
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Document:
    """One document's exact text: head (directives, `---` line), body (content), tail (`...`
    line)."""

    head: str
    body: str
    tail: str
    line: int  # 1-based line of the body's first character in the stream

    @property
    def text(self) -> str:
        return self.head + self.body + self.tail

    @property
    def has_directives(self) -> bool:
        return any(line.startswith("%") for line in lines(self.head))


@dataclass(frozen=True, slots=True)
class Style:
    """Block indentation of a document, in ruamel's terms (mapping, sequence, dash offset)."""

    mapping: int = 2
    sequence: int = 2
    offset: int = 0


def lines(text: str) -> list[str]:
    """`text` split after each `\\n` (YAML's line break; str.splitlines knows too many)."""
    parts = text.split("\n")
    return [part + "\n" for part in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def split_documents(text: str) -> list[Document]:
    """The documents of a stream; joining their `text` gives back `text` exactly."""
    splitter = _Splitter()
    for number, line in enumerate(lines(text), start=1):
        splitter.feed(number, line)
    return splitter.finish()


class _Splitter:
    """Line-driven state machine: document markers are only ever at column 0 (YAML's
    c-forbidden)."""

    def __init__(self) -> None:
        self.documents: list[Document] = []
        self._reset(1)

    def _reset(self, next_line: int) -> None:
        self.head: list[str] = []
        self.body: list[str] = []
        self.started = False
        self.body_line = next_line

    def feed(self, number: int, line: str) -> None:
        if _START.match(line):
            self._start(number, line)
        elif _END.match(line) and _BARE_MARKER.match(line):
            self._close(line, number + 1)
        elif line.startswith("%") and not self.started:
            # Comments before a directive belong to the prefix, so the head stays before the body.
            self.head += [*self.body, line]
            self.body = []
            self.body_line = number + 1
        else:
            self.body.append(line)

    def _start(self, number: int, line: str) -> None:
        if self.started or self.body:
            self._close("", number)
        self.started = True
        if _BARE_MARKER.match(line):
            self.head.append(line)
            self.body_line = number + 1
        else:
            self.body.append(line)
            self.body_line = number

    def _close(self, tail: str, next_line: int) -> None:
        self.documents.append(Document("".join(self.head), "".join(self.body), tail, self.body_line))
        self._reset(next_line)

    def finish(self) -> list[Document]:
        if self.head or self.body:
            self._close("", self.body_line)
        return self.documents


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.preserve_quotes = True
    yaml.width = _WIDTH
    yaml.brace_single_entry_mapping_in_flow_sequence = True  # [{name: a}], never the terse [name: a]
    return yaml


def load(body: str, source: str, first_line: int, document: int = 1) -> Any:
    """Round-trip load one document's body; MigrateError names the stream's file, line, column and
    document."""
    try:
        return _yaml().load(body)
    except MarkedYAMLError as error:
        mark = error.problem_mark or error.context_mark
        where = f"{source}:{first_line + mark.line}:{mark.column + 1}" if mark else f"{source}:{first_line}"
        detail = ", ".join(str(part) for part in (error.context, error.problem) if part)
        raise MigrateError(f"{where}: document {document}: invalid YAML: {detail or error}") from None
    except YAMLError as error:
        raise MigrateError(f"{source}:{first_line}: document {document}: invalid YAML: {error}") from None


def dump(data: Any, style: Style, explicit_start: bool = False) -> str:
    yaml = _yaml()
    yaml.indent(mapping=style.mapping, sequence=style.sequence, offset=style.offset)
    yaml.explicit_start = explicit_start
    stream = io.StringIO()
    yaml.dump(data, stream)
    return stream.getvalue()


def dump_flow(node: CommentedMap | CommentedSeq) -> str:
    """A flow collection rendered on its own, without its comments (the caller keeps the rest of the
    line they were on) and without the line break a document ends with."""
    stream = io.StringIO()
    _yaml().dump(_uncommented(node), stream)
    return stream.getvalue().removesuffix("\n").removesuffix("\n...")


def _uncommented(node: Any) -> Any:
    copy: CommentedMap | CommentedSeq
    if isinstance(node, CommentedMap):
        copy = CommentedMap((key, _uncommented(value)) for key, value in node.items())
    elif isinstance(node, CommentedSeq):
        copy = CommentedSeq(_uncommented(item) for item in node)
    else:
        return node
    if node.fa.flow_style():
        copy.fa.set_flow_style()
    return copy


def block_scalar_lines(text: str) -> frozenset[int]:
    """The 0-based lines holding the content of literal and folded block scalars (`|`, `>`) in one
    document's text, which parses: in them a `#` is text, and a blank line is part of the value."""
    found: set[int] = set()
    for event in _yaml().parse(text.replace("\r\n", "\n")):
        if isinstance(event, ScalarEvent) and event.style in ("|", ">"):
            end = event.end_mark.line + (1 if event.end_mark.column else 0)
            found.update(range(event.start_mark.line + 1, end))
    return frozenset(found)


def detect_style(data: Any) -> Style:
    """The indentation most of the document's block collections use (kubectl's style when none)."""
    mappings: Counter[int] = Counter()
    sequences: Counter[tuple[int, int]] = Counter()
    for key_column, child in _block_children(data):
        if isinstance(child, CommentedMap):
            mappings[child.lc.col - key_column] += 1
        else:
            sequences[(child.lc.item(0)[1] - key_column, child.lc.col - key_column)] += 1
    default = Style()
    mapping = _most_common(mappings, default.mapping)
    sequence, offset = _most_common(sequences, (default.sequence, default.offset))
    if mapping < 1 or offset < 0 or sequence - offset < 2:
        return default
    return Style(mapping, sequence, offset)


def _most_common(counter: Counter[_T], default: _T) -> _T:
    return counter.most_common(1)[0][0] if counter else default


def _block_children(node: Any) -> Iterator[tuple[int, CommentedMap | CommentedSeq]]:
    """(column of the key, value) for every non-empty block collection that is a mapping value."""
    if isinstance(node, CommentedMap):
        for key, value in node.items():
            if _is_block(value) and _is_block(node):
                yield node.lc.key(key)[1], value
            yield from _block_children(value)
    elif isinstance(node, CommentedSeq):
        for item in node:
            yield from _block_children(item)


def _is_block(node: Any) -> bool:
    return isinstance(node, CommentedMap | CommentedSeq) and len(node) > 0 and not node.fa.flow_style()


def plain(node: Any) -> Any:
    """The document as plain dicts, lists and scalars, for comparing meaning rather than text."""
    if isinstance(node, dict):
        return {plain(key): plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [plain(item) for item in node]
    return node
