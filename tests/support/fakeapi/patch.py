"""Patch documents applied to stored objects: JSON merge patch (RFC 7386) and JSON patch (RFC
6902)."""

from __future__ import annotations

import copy
from typing import Any

from npu_plugin.sim._fakeapi.status import ApiError, status_object

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"
SUPPORTED = (JSON_PATCH, MERGE, STRATEGIC, APPLY)


def unsupported_media_type(content_type: str) -> ApiError:
    accepted = ", ".join(SUPPORTED)
    message = f"the body of the request was in an unknown format - accepted media types include: {accepted}"
    return ApiError(status_object(415, message + f" (got {content_type!r})"))


def _unprocessable(message: str) -> ApiError:
    return ApiError(status_object(422, message, reason="Invalid"))


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386. Strategic merge and (approximately) server-side apply bodies are applied this way
    too."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(document: Any, operations: Any) -> Any:
    """RFC 6902 (add, remove, replace, move, copy, test); a failing operation is a 422, as in the
    API server."""
    if not isinstance(operations, list):
        raise ApiError(status_object(400, "json patch must be a JSON array of operations"))
    doc = copy.deepcopy(document)
    for operation in operations:
        doc = _apply_operation(doc, operation)
    return doc


def _apply_operation(doc: Any, operation: Any) -> Any:
    if not isinstance(operation, dict) or "path" not in operation:
        raise _unprocessable(f"invalid json patch operation: {operation!r}")
    op, path = operation.get("op"), operation["path"]
    if op in ("add", "replace", "test") and "value" not in operation:
        raise _unprocessable(f'json patch operation "{op}" needs a value')
    if op == "add":
        return _add(doc, path, copy.deepcopy(operation["value"]))
    if op == "remove":
        return _remove(doc, path)[0]
    if op == "replace":
        _get(doc, path)
        return _add(_remove(doc, path)[0], path, copy.deepcopy(operation["value"]))
    if op == "test":
        if _get(doc, path) != operation["value"]:
            raise _unprocessable(f"testing value {path} failed")
        return doc
    if op in ("move", "copy"):
        value = _get(doc, operation.get("from", ""))
        if op == "move":
            doc = _remove(doc, operation["from"])[0]
        return _add(doc, path, copy.deepcopy(value))
    raise _unprocessable(f"unexpected json patch operation {op!r}")


def _tokens(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"invalid json pointer {path!r}")
    return [t.replace("~1", "/").replace("~0", "~") for t in path[1:].split("/")]


def _child(container: Any, token: str, path: str) -> Any:
    if isinstance(container, dict) and token in container:
        return container[token]
    if isinstance(container, list) and token.isdigit() and int(token) < len(container):
        return container[int(token)]
    raise _unprocessable(f"doc is missing path: {path!r}")


def _parent(doc: Any, path: str) -> tuple[Any, str]:
    tokens = _tokens(path)
    if not tokens:
        raise _unprocessable("cannot operate on the whole document")
    container = doc
    for token in tokens[:-1]:
        container = _child(container, token, path)
    return container, tokens[-1]


def _get(doc: Any, path: str) -> Any:
    value = doc
    for token in _tokens(path):
        value = _child(value, token, path)
    return value


def _add(doc: Any, path: str, value: Any) -> Any:
    if path == "":
        return value
    container, token = _parent(doc, path)
    if isinstance(container, dict):
        container[token] = value
    elif isinstance(container, list) and (token == "-" or (token.isdigit() and int(token) <= len(container))):
        container.insert(len(container) if token == "-" else int(token), value)
    else:
        raise _unprocessable(f"doc is missing path: {path!r}")
    return doc


def _remove(doc: Any, path: str) -> tuple[Any, Any]:
    container, token = _parent(doc, path)
    removed = _child(container, token, path)
    if isinstance(container, dict):
        del container[token]
    else:
        del container[int(token)]
    return doc, removed
