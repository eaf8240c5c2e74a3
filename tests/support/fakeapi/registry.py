"""The registry at full fidelity: schema decoding, ResourceSlice validation, patches, strict
updates."""

from __future__ import annotations

from typing import Any

from npu_plugin.sim._fakeapi.cluster import Cluster
from npu_plugin.sim._fakeapi.kinds import JSON, Kind, meta
from npu_plugin.sim._fakeapi.registry import Registry
from npu_plugin.sim._fakeapi.status import bad_request
from npu_plugin.sim._fakeapi.store import Store
from tests.support.fakeapi import patch as patches
from tests.support.fakeapi.fielderrors import invalid, invalid_value
from tests.support.fakeapi.schema import decode
from tests.support.fakeapi.validation import validate


class FullRegistry(Registry):
    """`require_resource_version`: refuse (422) updates without metadata.resourceVersion, which the
    real server accepts for ResourceSlices and ResourceClaims (`AllowUnconditionalUpdate`)."""

    def __init__(self, store: Store, cluster: Cluster, *, require_resource_version: bool) -> None:
        super().__init__(store, cluster)
        self._require_rv = require_resource_version

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

    def patch(
        self, kind: Kind, key: tuple[str, str], body: Any, *, content_type: str, field_validation: str, subresource: str
    ) -> tuple[JSON, list[str]]:
        warnings: list[str] = []

        def change(current: JSON) -> JSON:
            patched = _apply_patch(current, body, content_type)
            obj, found = self.decode(kind, patched, field_validation)
            warnings.extend(found)
            self.check_url_identity(kind, obj, key)
            return self.updated(kind, obj, current, subresource)

        if content_type == patches.APPLY and self.store.find(kind, key) is None:
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
