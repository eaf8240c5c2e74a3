"""Carry the line edits between two renderings of a document over to its original text (pure).

`before` and `after` are the same YAML dumped before and after an edit; `original` is what the user
wrote. Where `original` and `before` agree line for line, the edit is replayed on the original lines,
so every line the edit did not touch keeps its exact bytes. Where the dumper had reformatted a region
and the edit touches it, that region is taken from `after`. Callers check the merge's meaning.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from difflib import SequenceMatcher

from npu_plugin.migrate.yamlstream import lines


@dataclass
class _Edits:
    """The edit from `before` to `after`, anchored on `before`'s lines."""

    kept: list[bool]
    inserted: dict[int, list[str]] = field(default_factory=dict)  # after-lines that go before line k

    def untouched(self, start: int, stop: int) -> bool:
        inside = any(self.inserted.get(k) for k in range(start + 1, stop))
        return all(self.kept[start:stop]) and not inside


def merge(original: str, before: str, after: str) -> str:
    """`original` with the edits that turn `before` into `after`."""
    mine, base = lines(original), lines(before)
    edits = _edits(base, lines(after))
    out: list[str] = []
    for _, i1, i2, j1, j2 in SequenceMatcher(None, mine, base, autojunk=False).get_opcodes():
        if i2 - i1 != j2 - j1 and edits.untouched(j1, j2):
            out += edits.inserted.get(j1, []) if j1 < j2 else []
            out += mine[i1:i2]
            continue
        # Equal, or reformatted line for line: replay on the user's lines. Otherwise on the dumper's.
        source = mine[i1:i2] if i2 - i1 == j2 - j1 else base[j1:j2]
        for k in range(j1, j2):
            out += edits.inserted.get(k, [])
            out += [source[k - j1]] if edits.kept[k] else []
    out += edits.inserted.get(len(base), [])
    return "".join(out)


def _edits(base: list[str], new: list[str]) -> _Edits:
    edits = _Edits(kept=[True] * len(base))
    dropped = Counter(base) - Counter(new)
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, base, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        for k in range(i1, i2):
            # The dumper drops comments that were attached to a deleted key; they were the user's.
            edits.kept[k] = _is_remark(base[k]) and dropped[base[k]] > 0
            dropped[base[k]] -= edits.kept[k]
        if j1 < j2:
            edits.inserted.setdefault(_anchor(base, edits.kept, i1, i2, new[j1]), []).extend(new[j1:j2])
    return edits


def _anchor(base: list[str], kept: list[bool], start: int, stop: int, first: str) -> int:
    """Where lines replacing base[start:stop] go: a comment stays above what now follows it."""
    at = start
    while at < stop and kept[at]:
        at += 1  # comments that led the deleted lines lead their replacement
    return at if at > start else _above_remarks(base, kept, start, first)


def _above_remarks(base: list[str], kept: list[bool], at: int, first: str) -> int:
    """Move an insertion above the comments that precede it: they describe the line after them."""
    indent = _indent(first)
    while at > 0 and kept[at - 1] and _is_remark(base[at - 1]) and _indent(base[at - 1]) <= indent:
        at -= 1
    return at


def _is_remark(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" ")) if line.strip() else 0
