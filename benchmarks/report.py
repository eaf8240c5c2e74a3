"""The benchmark table: one row per number, its context, its target and whether the target is
met."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    metric: str
    value: str
    context: str = ""
    target: str = ""
    met: bool | None = None  # None: a number without a target

    @property
    def verdict(self) -> str:
        return {True: "met", False: "MISSED", None: ""}[self.met]


def at_most(value: float, limit: float) -> bool:
    return value <= limit


def render(sections: list[tuple[str, list[Row]]]) -> str:
    header = Row("metric", "value", "context", "target")
    rows = [header] + [row for _, section in sections for row in section]
    cells = [[r.metric, r.value, r.context, r.target, "status" if r is header else r.verdict] for r in rows]
    width = [max(len(c[i]) for c in cells) for i in range(5)]
    lines, index = [], 1

    def line(row: list[str]) -> str:
        return "  ".join(cell.ljust(w) for cell, w in zip(row, width, strict=True)).rstrip()

    lines.append(line(cells[0]))
    for title, section in sections:
        lines.append(f"-- {title}")
        lines.extend(line(cells[index + i]) for i in range(len(section)))
        index += len(section)
    missed = sum(r.met is False for _, s in sections for r in s)
    targets = sum(r.met is not None for _, s in sections for r in s)
    lines.append(f"{targets - missed} of {targets} targets met" + (f"; {missed} MISSED" if missed else ""))
    return "\n".join(lines)
