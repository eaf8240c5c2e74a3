"""`migrate`'s core: a YAML stream in, the same stream with NPU limits turned into DRA claims out
(pure).

Documents that ask for no NPU are copied as their original text. A document that changes is edited
on the user's own lines at the positions the parser recorded (lineedits), so only the lines the edit
touches change; its ResourceClaimTemplates are inserted just before it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from ruamel.yaml.comments import CommentedMap

from npu_plugin.errors import MigrateError
from npu_plugin.migrate.claims import (
    ContainerClaim,
    Place,
    VnpuRequest,
    apply,
    claim_template,
    plan,
    share_capacity,
    vnpu_selectors,
)
from npu_plugin.migrate.findings import (
    Finding,
    annotation_findings,
    ascend_names,
    init_claim_findings,
    left_behind,
    mentions,
    object_label,
    queue_findings,
    quota_findings,
    scheduler_findings,
)
from npu_plugin.migrate.lineedits import LineEdits
from npu_plugin.migrate.options import VNPU_DEVICE_CLASS, Options
from npu_plugin.migrate.ranktable import rank_table_findings
from npu_plugin.migrate.workloads import (
    ShapeError,
    Workload,
    group_kind,
    identity,
    is_workload,
    kept_as_is,
    objects,
    qualified,
    workloads,
)
from npu_plugin.migrate.yamlstream import Document, Style, detect_style, dump, load, plain, split_documents

_TEMPLATE_KIND = ("resource.k8s.io", "ResourceClaimTemplate")
_JSON_INDENT = re.compile(r"\n( +)\S")  # the first indented line of a JSON file


@dataclass(frozen=True, slots=True)
class Change:
    """One container moved from an extended-resource limit to a claim (count 0: the entry only
    dropped)."""

    source: str
    line: int
    workload: str
    container: str
    resource: str
    count: int
    claim: str
    template: str
    host: str = ""  # the container whose claim an init container shares

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}: {self.workload}, {self.container}: {self.resource}: {self.count}"
        if not self.count:
            return f"{where} -> entry dropped, no claim"
        if self.host:
            template = f"(ResourceClaimTemplate {self.template})"
            return f'{where} -> claim "{self.claim}" of {self.host} {template}, which starts after it'
        return f'{where} -> claim "{self.claim}" from ResourceClaimTemplate {self.template}'


@dataclass(frozen=True, slots=True)
class Result:
    text: str
    changes: tuple[Change, ...]
    warnings: tuple[str, ...]
    left_behind: tuple[str, ...] = ()  # NPU requests in objects migrate cannot rewrite, one line each
    unresolved: tuple[str, ...] = ()  # what keeps the migrated input from working and migrate cannot fix, one each
    workloads: int = 0  # objects with a change
    skipped: int = 0  # objects left with NPU requests migrate cannot rewrite
    matched: frozenset[str] = frozenset()  # the selected resource names the input asks for
    seen: frozenset[str] = frozenset()  # every Ascend resource name the input asks for


def migrate_text(text: str, options: Options | None = None, source: str = "<stdin>") -> Result:
    """Rewrite every workload in `text`; MigrateError (naming file, line, document) on bad input."""
    documents = split_documents(text)
    parsed = _parse(documents, source)
    stream = _Stream(source, options or Options(), _existing_templates(documents, parsed, source))
    numbers = _numbers(parsed)
    pieces = [stream.rewrite(doc, data, number) for doc, data, number in zip(documents, parsed, numbers, strict=True)]
    return stream.result("".join(pieces), parsed)


def migrate_json(text: str, options: Options | None = None, source: str = "<stdin>") -> Result:
    """Rewrite a JSON manifest (one object, or a `kind: List`) and write it back as JSON.

    The templates join the workload in a `kind: List` (the object's own, or a new one around it), so
    the file stays one JSON value that `kubectl apply -f` reads; it is re-serialised with its
    indentation.
    """
    try:
        json.loads(text)
    except json.JSONDecodeError as error:
        raise MigrateError(f"{source}:{error.lineno}:{error.colno}: document 1: invalid JSON: {error.msg}") from None
    document = Document("", text, "", 1)
    data = load(text, source, 1)
    stream = _Stream(source, options or Options(), _existing_templates([document], [data], source))
    planned = stream.prepare(document, data, 1)
    for found, items in planned:
        apply(found, items)
    stream.report(document, data, 1, planned)
    if not planned:
        return stream.result(text, [data])
    templates = {
        id(found.obj): [stream.template(found, item) for item in items if item.own_claim] for found, items in planned
    }
    if isinstance(data, dict) and data.get("kind") == "List" and isinstance(data.get("items"), list):
        items = [plain(t) for item in data["items"] for t in [*templates.get(id(item), []), item]]
        value = plain(data) | {"items": items}
    else:
        value = {"apiVersion": "v1", "kind": "List", "items": [*map(plain, templates[id(data)]), plain(data)]}
    indent = _JSON_INDENT.search(text)
    rendered = json.dumps(value, indent=len(indent[1]) if indent else 2, ensure_ascii=False)
    return stream.result(rendered + ("\n" if text.endswith("\n") else ""), [data])


def _parse(documents: list[Document], source: str) -> list[Any]:
    parsed: list[Any] = []
    for doc in documents:
        number = sum(data is not None for data in parsed) + 1
        parsed.append(load(doc.body.replace("\r\n", "\n"), source, doc.line, number))
    return parsed


def _numbers(parsed: list[Any]) -> Iterator[int]:
    """1-based document numbers as a reader counts them: comment-only stretches are not
    documents."""
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
    left_behind: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)
    migrated: list[Workload] = field(default_factory=list)
    unmigrated: set[str] = field(default_factory=set)
    skipped: int = 0

    def rewrite(self, doc: Document, data: Any, number: int) -> str:
        planned = self.prepare(doc, data, number)
        if planned:
            style = detect_style(data)
            body = _edit(doc, data, style, planned)
            templates = [
                dump(self.template(found, item), style) for found, items in planned for item in items if item.own_claim
            ]
            text = _assemble(doc, templates, body)
        else:
            text = doc.text
        self.report(doc, data, number, planned)
        return text

    def prepare(self, doc: Document, data: Any, number: int) -> list[tuple[Workload, list[ContainerClaim]]]:
        """The document's checked plan, recorded as changes; the data is not edited yet."""
        planned = self._plan(doc, data, number)
        for found, items in planned:
            self._record(doc, number, found, items)
        return planned

    def result(self, text: str, parsed: list[Any]) -> Result:
        seen = frozenset(name for data in parsed for name in ascend_names(data))
        return Result(
            text,
            tuple(self.changes),
            tuple(self.warnings),
            tuple(self.left_behind),
            tuple(self.unresolved),
            len({id(found.obj) for found in self.migrated}),
            self.skipped,
            frozenset(change.resource for change in self.changes) | self.unmigrated,
            seen,
        )

    def _plan(self, doc: Document, data: Any, number: int) -> list[tuple[Workload, list[ContainerClaim]]]:
        found: list[Workload] = []
        for obj in objects(data):
            if kept_as_is(obj):
                continue
            try:
                found += workloads(obj)
            except ShapeError as error:
                raise Place(self.source, number, doc.line, object_label(obj)).error(str(error), error.line) from None
        shared = _shared_nodes(data) if found else set()
        resources = self.options.resource_names
        planned = [(w, plan(w, resources, self._place(doc, number, w), shared)) for w in found]
        return [(w, items) for w, items in planned if items]

    def _place(self, doc: Document, number: int, found: Workload) -> Place:
        return Place(self.source, number, doc.line, _who(found))

    def _record(self, doc: Document, number: int, found: Workload, items: list[ContainerClaim]) -> None:
        place = self._place(doc, number, found)
        if found not in self.migrated:
            self.migrated.append(found)
        for item in items:
            key = (found.namespace, item.template)
            template = qualified(*key)
            if item.own_claim and key in self.existing:
                raise place.error(
                    f"ResourceClaimTemplate {template} already exists at {self.existing[key]}",
                    item.line,
                    item.container,
                )
            if item.own_claim and key in self.generated:
                raise place.error(
                    f"ResourceClaimTemplate {template} would also be generated for {self.generated[key]}",
                    item.line,
                    item.container,
                )
            if item.own_claim and item.vnpu is None and self.options.device_class_for(item.resource) is None:
                detail = f"{item.resource} has no default DeviceClass: give --device-class"
                raise place.error(detail, item.line, item.container)
            if item.own_claim:
                self.generated[key] = f"document {number} ({_who(found)}), {item.container.label}"
            self.changes.append(
                Change(
                    self.source,
                    doc.line + item.line,
                    _who(found),
                    item.container.label,
                    item.resource,
                    item.count,
                    item.claim,
                    template,
                    item.host.label if item.host else "",
                )
            )

    def template(self, found: Workload, item: ContainerClaim) -> CommentedMap:
        options = self.options
        if item.vnpu is not None and options.shared_device_class is not None and item.count == 1:
            return claim_template(
                item.template,
                found.namespace,
                1,
                options.shared_device_class,
                None,
                selectors=vnpu_selectors(options.driver_name, item.resource, VnpuRequest()),
                capacity=share_capacity(item.vnpu),
            )
        if item.vnpu is not None:
            selectors = vnpu_selectors(options.driver_name, item.resource, item.vnpu)
            return claim_template(
                item.template,
                found.namespace,
                item.count,
                VNPU_DEVICE_CLASS,
                options.topology_attribute,
                selectors=selectors,
            )
        device_class = options.device_class_for(item.resource)
        assert device_class is not None  # _record refused a whole-NPU claim without one
        return claim_template(item.template, found.namespace, item.count, device_class, options.topology_attribute)

    def report(
        self, doc: Document, data: Any, number: int, planned: list[tuple[Workload, list[ContainerClaim]]]
    ) -> None:
        """What this document (its data migrated) says, in order: the scheduler and the rank table of
        each migrated workload, quotas, what stays unresolved, requests left behind, other mentions."""
        migrated = [found for found, items in planned if any(item.count for item in items)]
        resources = self.options.resource_names
        classes = {resource: name for resource in resources if (name := self.options.device_class_for(resource))}
        say = self._say(doc, number)
        for found in migrated:
            said = [say(f) for f in scheduler_findings(found, _who(found))]
            self.warnings += [warning for warning in said if warning not in self.warnings]
            self.warnings += [say(f) for f in rank_table_findings(found, _who(found))]
        for found, items in planned:
            self.warnings += [say(f) for f in init_claim_findings(items, _who(found))]
        for obj in objects(data):
            quotas = quota_findings(obj, resources, classes)
            queue = queue_findings(obj, resources)
            behind = left_behind(obj, resources)
            self.warnings += [say(f) for f in quotas]
            self.unresolved += [say(f) for f in queue]
            self.unresolved += [say(f) for found in workloads(obj) for f in annotation_findings(found, _who(found))]
            self.left_behind += [say(f) for f in behind]
            self.skipped += bool(behind)
            self.unmigrated |= {resource for resource in resources if behind and mentions(obj, [resource])}
            named = [resource for resource in resources if mentions(obj, [resource])]
            if named and not (quotas or queue or behind or is_workload(obj)):
                self.warnings.append(
                    say(
                        Finding(
                            obj.lc.line,
                            f"{object_label(obj)} mentions {', '.join(named)} but is not a kind migrate rewrites; "
                            "left unchanged",
                        )
                    )
                )

    def _say(self, doc: Document, number: int) -> Callable[[Finding], str]:
        return lambda finding: f"{self.source}:{doc.line + finding.line}: document {number}: {finding.text}"


def _who(found: Workload) -> str:
    return f"{found.label}, {found.role_label}" if found.role_label else found.label


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


def _edit(doc: Document, data: Any, style: Style, planned: list[tuple[Workload, list[ContainerClaim]]]) -> str:
    """The document body with `planned` applied to `data` and to the user's own lines."""
    newline = "\r\n" if "\r\n" in doc.body else "\n"
    terminated = doc.body.endswith("\n")
    edits = LineEdits(doc.body + ("" if terminated else newline), data, newline, open_end=not terminated)
    for found, items in planned:
        edits.plan(found, items)
    for found, items in planned:
        apply(found, items)
    text = edits.render()
    if text is not None and not terminated:
        text = text.removesuffix(newline)
    if text is None or not _means(text, data):
        # A shape the line edits do not cover (a key spanning lines, say): the whole document,
        # dumped.
        dumped = dump(data, style, doc.body.startswith("---")).replace("\n", newline)
        text = dumped if terminated else dumped.removesuffix(newline)
    return text


def _means(text: str, data: Any) -> bool:
    try:
        return bool(plain(load(text.replace("\r\n", "\n"), "<edit>", 1)) == plain(data))
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
