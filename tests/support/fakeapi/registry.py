"""The registry at full fidelity: schema decoding, ResourceSlice validation, patches, strict
updates."""

from __future__ import annotations

from typing import Any

from npu_plugin.sim._fakeapi.cluster import Cluster
from npu_plugin.sim._fakeapi.kinds import JSON, RESOURCE_CLAIMS, Kind, meta
from npu_plugin.sim._fakeapi.registry import Registry
from npu_plugin.sim._fakeapi.status import bad_request
from npu_plugin.sim._fakeapi.store import Store
from tests.support.fakeapi import patch as patches
from tests.support.fakeapi.apply import apply_status_devices
from tests.support.fakeapi.authz import Authorizer
from tests.support.fakeapi.fielderrors import invalid, invalid_value
from tests.support.fakeapi.schema import decode
from tests.support.fakeapi.validation import validate


class FullRegistry(Registry):
    """`require_resource_version`: refuse (422) updates without metadata.resourceVersion, which the
    real server accepts for ResourceSlices and ResourceClaims (`AllowUnconditionalUpdate`)."""

    def __init__(self, store: Store, cluster: Cluster, *, require_resource_version: bool) -> None:
        super().__init__(store, cluster)
        self._require_rv = require_resource_version
        self.authorizer = Authorizer()
        self._applied: dict[tuple[str, str], set[str]] = {}  # (uid, manager): status.devices entries owned

    def decode(self, kind: Kind, body: Any, field_validation: str) -> tuple[JSON, list[str]]:
        return decode(kind, body, field_validation)

    def validate(self, kind: Kind, new: JSON, old: JSON | None) -> None:
        if errors := validate(kind, new, old, self.cluster.minor):
            raise invalid(kind, meta(new).get("name", "") if old is None else old["metadata"]["name"], errors)

    def check_preconditions(self, kind: Kind, new: JSON, current: JSON) -> None:
        super().check_preconditions(kind, new, current)
        if not meta(new).get("resourceVersion", "") and self._require_rv:
            errors = [invalid_value("metadata.resourceVersion", 0, "must be specified for an update")]
            raise invalid(kind, current["metadata"]["name"], errors)

    def updated(self, kind: Kind, new: JSON, current: JSON, subresource: str, verb: str = "update") -> JSON:
        """Also the per-driver authorization a change of a claim's `status.devices` needs (1.36+)."""
        stored = super().updated(kind, new, current, subresource)
        if kind is RESOURCE_CLAIMS and subresource == "status":
            self.authorizer.check_device_status(kind, verb, stored, current, self.cluster.minor)
        return stored

    def patch(
        self,
        kind: Kind,
        key: tuple[str, str],
        body: Any,
        *,
        content_type: str,
        field_validation: str,
        subresource: str,
        field_manager: str = "",
    ) -> tuple[JSON, list[str]]:
        warnings: list[str] = []
        applied_devices = content_type == patches.APPLY and kind is RESOURCE_CLAIMS and subresource == "status"

        def change(current: JSON) -> JSON:
            owner = (current["metadata"]["uid"], field_manager)
            if applied_devices:
                patched, owned = apply_status_devices(current, body, self._applied.get(owner, set()))
            else:
                patched = _apply_patch(current, body, content_type)
            obj, found = self.decode(kind, patched, field_validation)
            warnings.extend(found)
            self.check_url_identity(kind, obj, key)
            stored = self.updated(kind, obj, current, subresource, verb="patch")
            if applied_devices:
                self._applied[owner] = owned
            return stored

        if content_type == patches.APPLY and not subresource and self.store.find(kind, key) is None:
            return self.create(kind, key[0], body, field_validation)
        new, _ = self.store.update(kind, key, change)
        return new, warnings


def _apply_patch(current: JSON, body: Any, content_type: str) -> Any:
    if content_type == patches.JSON_PATCH:
        return patches.json_patch(current, body)
    if not isinstance(body, dict):
        raise bad_request("the patch body must be a JSON object")
    if content_type == patches.APPLY:
        body = {k: v for k, v in body.items() if k != "metadata"} | {
            "metadata": {k: v for k, v in (body.get("metadata") or {}).items() if k != "resourceVersion"}
        }
    return patches.merge_patch(current, body)
