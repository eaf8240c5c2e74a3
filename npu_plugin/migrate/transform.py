"""`migrate`'s core: a YAML stream in, the same stream with NPU limits turned into DRA claims out (pure).

Documents that ask for no NPU are copied as their original text. A document that changes is edited
through a ruamel round trip whose line edits are replayed on the original text (linemerge), so only
the lines the edit touches change; its ResourceClaimTemplates are inserted just before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from npu_plugin.errors import MigrateError
from npu_plugin.migrate.claims import ContainerClaim, Place, apply, claim_template, plan
from npu_plugin.migrate.linemerge import merge
from npu_plugin.migrate.options import Options
from npu_plugin.migrate.workloads import Workload, group_kind, identity, objects, qualified, workload
from npu_plugin.migrate.yamlstream import Document, Style, detect_style, dump, load, plain, split_documents

_TEMPLATE_KIND = ("resource.k8s.io", "ResourceClaimTemplate")


@dataclass(frozen=True, slots=True)
class Change:
    """One container moved from an extended-resource limit to a claim."""

    source: str
    line: int
    workload: str
    container: str
    resource: str
    count: int
    claim: str
    template: str

    def __str__(self) -> str:
        return (
            f"{self.source}:{self.line}: {self.workload}, {self.container}: {self.resource}: {self.count}"
            f' -> claim "{self.claim}" from ResourceClaimTemplate {self.template}'
        )


@dataclass(frozen=True, slots=True)
class Result:
    text: str
    changes: tuple[Change, ...]
    warnings: tuple[str, ...]


def migrate_text(text: str, options: Options | None = None, source: str = "<stdin>") -> Result:
    """Rewrite every workload in `text`; MigrateError (naming file, line, document) on bad input."""
    documents = split_documents(text)
    parsed = [load(doc.body.replace("\r\n", "\n"), source, doc.line) for doc in documents]
    stream = _Stream(source, options or Options(), _existing_templates(documents, parsed, source))
    numbers = _numbers(parsed)
    pieces = [stream.rewrite(doc, data, number) for doc, data, number in zip(documents, parsed, numbers, strict=True)]
    return Result("".join(pieces), tuple(stream.changes), tuple(stream.warnings))


def _numbers(parsed: list[Any]) -> Iterator[int]:
    """1-based document numbers as a reader counts them: comment-only stretches are not documents."""
    number = 0
    for data in parsed:
        number += data is not None
        yield number


def _existing_templates(documents: list[Document], parsed: list[Any], source: str) -> dict[tuple[str | None, str], str]:
    found: dict[tuple[str | None, str], str] = {}
    for doc, data in zip(documents, parsed, strict=True):
        for obj in objects(data):
            namespace, name = identity(obj)
            if group_kind(obj) == _TEMPLATE_KIND and name:
                found[(namespace, name)] = f"{source}:{doc.line + obj.lc.line}"
    return found


@dataclass
class _Stream:
    """What rewriting one stream has produced so far."""

    source: str
    options: Options
    existing: dict[tuple[str | None, str], str]
    generated: dict[tuple[str | None, str], str] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def rewrite(self, doc: Document, data: Any, number: int) -> str:
        planned = self._plan(doc, data, number)
        if not planned:
            self._warn_unmigrated(doc, data, number)
            return doc.text
        for found, items in planned:
            self._record(doc, number, found, items)

        def edit() -> None:
            for found, items in planned:
                apply(found, items, self.options.resource_name)

        style = detect_style(data)
        body = _edit(doc, data, style, edit)
        templates = [self._template(found, item, style) for found, items in planned for item in items]
        return _assemble(doc, templates, body)

    def _plan(self, doc: Document, data: Any, number: int) -> list[tuple[Workload, list[ContainerClaim]]]:
        found = [w for obj in objects(data) if (w := workload(obj)) is not None]
        shared = _shared_nodes(data) if found else set()
        planned = [(w, plan(w, self.options.resource_name, self._place(doc, number, w), shared)) for w in found]
        return [(w, items) for w, items in planned if items]

    def _place(self, doc: Document, number: int, found: Workload) -> Place:
        return Place(self.source, number, doc.line, found.label)

    def _record(self, doc: Document, number: int, found: Workload, items: list[ContainerClaim]) -> None:
        place = self._place(doc, number, found)
        for item in items:
            key = (found.namespace, item.template)
            template = qualified(*key)
            if key in self.existing:
                raise place.error(
                    f"ResourceClaimTemplate {template} already exists at {self.existing[key]}",
                    item.line,
                    item.container,
                )
            if key in self.generated:
                raise place.error(
                    f"ResourceClaimTemplate {template} would also be generated for {self.generated[key]}",
                    item.line,
                    item.container,
                )
            self.generated[key] = f"document {number} ({found.label}), {item.container.label}"
            self.changes.append(
                Change(
                    self.source,
                    doc.line + item.line,
                    found.label,
                    item.container.label,
                    self.options.resource_name,
                    item.count,
                    item.claim,
                    template,
                )
            )

    def _template(self, found: Workload, item: ContainerClaim, style: Style) -> str:
        options = self.options
        template = claim_template(
            item.template, found.namespace, item.count, options.device_class, options.topology_attribute
        )
        return dump(template, style)

    def _warn_unmigrated(self, doc: Document, data: Any, number: int) -> None:
        resource = self.options.resource_name
        for obj in objects(data):
            if workload(obj) is None and _mentions(obj, resource):
                kind = obj.get("kind") or "object"
                self.warnings.append(
                    f"{self.source}:{doc.line + obj.lc.line}: document {number} ({kind} "
                    f"{qualified(*_named(obj))}) mentions {resource} but is not a workload "
                    "kind migrate rewrites; left unchanged"
                )


def _named(obj: Any) -> tuple[str | None, str]:
    namespace, name = identity(obj)
    return namespace, name or "<unnamed>"


def _mentions(node: Any, resource: str) -> bool:
    """Whether a key names the resource, as limits do and quotas do (`requests.<resource>`)."""
    if isinstance(node, dict):
        return any(_names_resource(key, resource) or _mentions(value, resource) for key, value in node.items())
    if isinstance(node, list):
        return any(_mentions(item, resource) for item in node)
    return False


def _names_resource(key: Any, resource: str) -> bool:
    return isinstance(key, str) and (key == resource or key.endswith("." + resource))


def _shared_nodes(data: Any) -> set[int]:
    """ids of collections reached along more than one path (YAML aliases): editing one edits all."""
    seen: set[int] = set()
    shared: set[int] = set()
    stack = [data]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict | list):
            continue
        if id(node) in seen:
            shared.add(id(node))
            continue
        seen.add(id(node))
        stack.extend(node.values() if isinstance(node, dict) else node)
    return shared


def _edit(doc: Document, data: Any, style: Style, edit: Callable[[], None]) -> str:
    """The document body after `edit` mutates `data`, keeping every line the edit did not touch."""
    newline = "\r\n" if "\r\n" in doc.body else "\n"
    original = doc.body.replace("\r\n", "\n")
    terminated = original.endswith("\n")
    original += "" if terminated else "\n"
    explicit = original.startswith("---")
    before = dump(data, style, explicit)
    edit()
    after = dump(data, style, explicit)
    merged = merge(original, before, after)
    if not _means(merged, data):
        merged = after  # the merge met a region the dumper reformats; its rendering is still right
    if not terminated:
        merged = merged.removesuffix("\n")
    return merged.replace("\n", newline)


def _means(text: str, data: Any) -> bool:
    try:
        return bool(plain(load(text, "<merge>", 1)) == plain(data))
    except MigrateError:
        return False


def _assemble(doc: Document, templates: list[str], body: str) -> str:
    """The templates as documents of their own, just before the workload they serve."""
    newline = "\r\n" if "\r\n" in doc.text else "\n"
    marker = "---" + newline
    templates = [template.replace("\n", newline) for template in templates]
    if doc.has_directives:
        return doc.head + "".join(t + marker for t in templates) + body + doc.tail
    if doc.head or body.startswith("---"):
        return "".join(marker + t for t in templates) + doc.head + body + doc.tail
    return "".join(t + marker for t in templates) + body + doc.tail
