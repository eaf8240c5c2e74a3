"""API semantics over the store: defaulting, preconditions, generation, the status subresource,
deletion.

Decoding and validation are kept plain here (a body must be a JSON object; nothing is validated);
the test tree's fake API overrides `decode` and `validate` with the API server's schema and rules.
"""

from __future__ import annotations

import copy
import random
import uuid
from collections.abc import Callable
from typing import Any

from npu_plugin.sim._fakeapi.chunks import decode_continue, encode_continue, expired
from npu_plugin.sim._fakeapi.cluster import Cluster
from npu_plugin.sim._fakeapi.kinds import DEVICE_CLASSES, JSON, RESOURCE_SLICES, Kind, meta
from npu_plugin.sim._fakeapi.status import ApiError, bad_request, conflict, internal_error
from npu_plugin.sim._fakeapi.store import Store, key_of, now

# names.SimpleNameGenerator: 5 characters from an alphabet without vowels, after at most 58 of the
# prefix.
_NAME_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
_MAX_GENERATED_PREFIX = 58
_GENERATE_NAME_ATTEMPTS = 8
_SYSTEM_FIELDS = ("uid", "creationTimestamp", "generation", "deletionTimestamp", "deletionGracePeriodSeconds")


def generate_name(prefix: str) -> str:
    return prefix[:_MAX_GENERATED_PREFIX] + "".join(random.choices(_NAME_ALPHABET, k=5))


def _ensure_namespace(kind: Kind, obj: JSON, namespace: str) -> None:
    """`EnsureObjectNamespaceMatchesRequestNamespace`: fill in, clear for cluster scope, or
    refuse."""
    metadata = meta(obj)
    if not kind.namespaced:
        metadata.pop("namespace", None)
    elif metadata.get("namespace", namespace) != namespace:
        raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
    else:
        metadata["namespace"] = namespace


class Registry:
    """What the REST handlers of the real API server do between decoding and storage."""

    def __init__(self, store: Store, cluster: Cluster | None = None) -> None:
        self.store = store
        self.cluster = cluster or Cluster()

    # ---- what a higher-fidelity server refines
    def decode(self, kind: Kind, body: Any, field_validation: str) -> tuple[JSON, list[str]]:
        """The object of a request body, and the warnings decoding it gives."""
        if not isinstance(body, dict):
            raise bad_request(f"the body of a {kind.kind} must be a JSON object")
        return copy.deepcopy(body), []

    def validate(self, kind: Kind, new: JSON, old: JSON | None) -> None:
        """Raise a 422 ApiError for an object the API server would refuse (`old` is None on
        create)."""

    # ---- create
    def create(
        self, kind: Kind, namespace: str, body: Any, field_validation: str, *, dry_run: bool = False
    ) -> tuple[JSON, list[str]]:
        """Create; a dry run (`dryRun=All`) decodes, defaults, drops and validates alike but stores
        nothing."""
        obj, warnings = self.decode(kind, body, field_validation)
        _ensure_namespace(kind, obj, namespace)
        if meta(obj).get("resourceVersion"):
            raise internal_error("resourceVersion should not be set on objects to be created")
        obj = prepare_for_create(kind, obj)
        if kind is RESOURCE_SLICES:
            self.cluster.drop_disabled_fields(obj, None)
        elif kind is DEVICE_CLASSES:
            self.cluster.drop_disabled_class_fields(obj, None)
        if dry_run:
            if not meta(obj).get("name") and meta(obj).get("generateName"):
                meta(obj)["name"] = generate_name(meta(obj)["generateName"])
            self.validate(kind, obj, None)
            return obj, warnings
        return self._create_prepared(kind, obj, validated=True), warnings

    def _create_prepared(self, kind: Kind, obj: JSON, *, validated: bool) -> JSON:
        metadata = meta(obj)
        generated = not metadata.get("name") and bool(metadata.get("generateName"))
        for attempt in range(_GENERATE_NAME_ATTEMPTS):
            if generated:
                metadata["name"] = generate_name(metadata["generateName"])
            if validated:
                self.validate(kind, obj, None)
            try:
                return self.store.create(kind, obj)
            except ApiError as err:
                # Since Kubernetes 1.32 the server retries a generated name that collides.
                if not generated or err.code != 409 or attempt == _GENERATE_NAME_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    # ---- read
    def list_collection(
        self,
        kind: Kind,
        namespace: str | None,
        matches: Callable[[JSON], bool],
        *,
        limit: int = 0,
        continue_token: str = "",
        selected: bool = False,
    ) -> JSON:
        """`matches(obj)` selects the items (a field/label selector; `selected` says one was given).
        With `limit`, one chunk: `metadata.continue` while more may follow, and
        `metadata.remainingItemCount` when no selector makes the count unknowable."""
        after, rv = None, 0
        if continue_token:
            after, rv = decode_continue(kind, continue_token)
            if rv < self.store.oldest_listable:
                raise expired()
        items, current, last, remaining = self.store.page(kind, namespace, matches, after, limit)
        metadata: JSON = {"resourceVersion": str(rv or current)}
        if last is not None:
            metadata["continue"] = encode_continue(kind, last, rv or current)
            if not selected:
                metadata["remainingItemCount"] = remaining
        return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version, "metadata": metadata, "items": items}

    # ---- update
    def update(
        self, kind: Kind, key: tuple[str, str], body: Any, *, field_validation: str, subresource: str
    ) -> tuple[JSON, list[str]]:
        obj, warnings = self.decode(kind, body, field_validation)
        self.check_url_identity(kind, obj, key)
        new, _ = self.store.update(kind, key, lambda current: self.updated(kind, obj, current, subresource))
        return new, warnings

    @staticmethod
    def check_url_identity(kind: Kind, obj: JSON, key: tuple[str, str]) -> None:
        _ensure_namespace(kind, obj, key[0])
        name = meta(obj).get("name", "")
        if name != key[1]:
            raise bad_request(f"the name of the object ({name}) does not match the name on the URL ({key[1]})")

    def updated(self, kind: Kind, new: JSON, current: JSON, subresource: str) -> JSON:
        """The object a PUT of `new` over `current` stores (runs under the store lock)."""
        self.check_preconditions(kind, new, current)
        new = _apply_subresource(kind, new, current, subresource)
        if kind is RESOURCE_SLICES:
            self.cluster.drop_disabled_fields(new, current)
        elif kind is DEVICE_CLASSES:
            self.cluster.drop_disabled_class_fields(new, current)
        _keep_system_fields(kind, new, current)
        self.validate(kind, new, current)
        return new

    def check_preconditions(self, kind: Kind, new: JSON, current: JSON) -> None:
        uid, current_uid = meta(new).get("uid", ""), current["metadata"]["uid"]
        if uid and uid != current_uid:
            why = f"Precondition failed: UID in precondition: {uid}, UID in object meta: {current_uid}"
            raise conflict(kind, current["metadata"]["name"], why)
        rv = meta(new).get("resourceVersion", "")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise conflict(kind, current["metadata"]["name"])

    # ---- delete
    def delete(self, kind: Kind, key: tuple[str, str], options: Any) -> tuple[JSON, bool]:
        """Delete, or with finalizers mark for deletion; return the object and whether it is
        gone."""
        preconditions = (options.get("preconditions") if isinstance(options, dict) else None) or {}

        def check(current: JSON) -> None:
            metadata = current["metadata"]
            for field, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
                want = preconditions.get(field)
                if want and metadata.get(field) != want:
                    actual = metadata.get(field)
                    why = f"Precondition failed: {label} in precondition: {want}, {label} in object meta: {actual}"
                    raise conflict(kind, key[1], why)

        return self.store.delete(kind, key, check)

    # ---- Python-side helpers (no validation: tests may plant any state)
    def put(self, kind: Kind, obj: JSON) -> JSON:
        obj = self.decode(kind, obj, "Ignore")[0]
        _ensure_namespace(kind, obj, meta(obj).get("namespace") or "default")
        meta(obj).pop("resourceVersion", None)
        if meta(obj).get("name") and self.store.find(kind, key_of(obj)) is not None:
            return self.store.update(kind, key_of(obj), lambda current: _keep_system_fields(kind, obj, current))[0]
        status = obj.get("status")
        created = prepare_for_create(kind, obj)
        if status is not None:
            created["status"] = status
        return self._create_prepared(kind, created, validated=False)


def prepare_for_create(kind: Kind, obj: JSON) -> JSON:
    metadata = meta(obj)
    for field in _SYSTEM_FIELDS:
        metadata.pop(field, None)
    metadata["uid"] = str(uuid.uuid4())
    metadata["creationTimestamp"] = now()
    if kind.tracks_generation:
        metadata["generation"] = 1
    if kind.status_subresource:
        obj.pop("status", None)
    return obj


def _apply_subresource(kind: Kind, new: JSON, current: JSON, subresource: str) -> JSON:
    """A status write changes only status; a main write keeps the stored status (when there is a
    subresource)."""
    if subresource == "status":
        result = {**current}
        if "status" in new:
            result["status"] = new["status"]
        else:
            result.pop("status", None)
        return result
    if kind.status_subresource:
        new.pop("status", None)
        if "status" in current:
            new["status"] = current["status"]
    return new


def _keep_system_fields(kind: Kind, new: JSON, current: JSON) -> JSON:
    metadata, old = meta(new), current["metadata"]
    metadata.setdefault("uid", old.get("uid"))
    for field in _SYSTEM_FIELDS[1:]:
        metadata.pop(field, None)
        if field in old:
            metadata[field] = old[field]
    if kind.tracks_generation and new.get("spec") != current.get("spec"):
        metadata["generation"] = int(old.get("generation", 0)) + 1
    metadata["resourceVersion"] = old["resourceVersion"]
    return new
