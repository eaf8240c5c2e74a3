"""Continue tokens of chunked LISTs, written as the API server writes them (pure functions).

`storage.EncodeContinue`: base64url (no padding) of `{"v": "meta.k8s.io/v1", "rv": <list
resourceVersion>, "start": "<key after the prefix>\\x00"}`, the start key being the last returned
object's key (`namespace/name`, or `name` for a cluster-scoped kind) plus a NUL, so the next range
begins just after it.
"""

from __future__ import annotations

import base64
import binascii
import json

from npu_plugin.sim._fakeapi.kinds import Kind
from npu_plugin.sim._fakeapi.status import ApiError, bad_request, status_object
from npu_plugin.sim._fakeapi.store import ObjectKey

_VERSION = "meta.k8s.io/v1"
EXPIRED_MESSAGE = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new "
    "list without the continue parameter, or use the continue token in this response to retrieve the remainder "
    "of the results. Continuing with the provided token results in an inconsistent list - objects that were "
    "created, modified, or deleted between the time the first chunk was returned and now may show up in the list."
)


def encode_continue(kind: Kind, key: ObjectKey, resource_version: int) -> str:
    start = f"{key[0]}/{key[1]}" if kind.namespaced else key[1]
    token = json.dumps({"v": _VERSION, "rv": resource_version, "start": start + "\x00"}, separators=(",", ":"))
    return base64.urlsafe_b64encode(token.encode()).decode().rstrip("=")


def decode_continue(kind: Kind, token: str) -> tuple[ObjectKey, int]:
    """The key to continue after and the list's resourceVersion; 400 for a token the server could
    not have written."""
    try:
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as error:
        raise bad_request(f"continue key is not valid: {error}") from None
    if not isinstance(data, dict) or data.get("v") != _VERSION:
        version = data.get("v") if isinstance(data, dict) else None
        raise bad_request(f'continue key is not valid: server does not recognize this encoded version "{version}"')
    rv, start = data.get("rv"), data.get("start")
    if not isinstance(rv, int) or rv <= 0:
        raise bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    if not isinstance(start, str) or not start.rstrip("\x00"):
        raise bad_request("continue key is not valid: encoded start key empty (version meta.k8s.io/v1)")
    name = start.rstrip("\x00")
    if kind.namespaced:
        namespace, _, name = name.partition("/")
        return (namespace, name), rv
    return ("", name), rv


def expired() -> ApiError:
    return ApiError(status_object(410, EXPIRED_MESSAGE, "Expired"))
