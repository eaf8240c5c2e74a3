"""Kubernetes `Status` objects, field errors, and the exception that carries them to the HTTP layer."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._kubeapi.kinds import JSON, Kind

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def status_object(code: int, message: str, reason: str = "", details: JSON | None = None) -> JSON:
    """A failure `Status` as the API server writes it (`metav1.Status`)."""
    status: JSON = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or _REASONS.get(code, "Unknown"),
        "code": code,
    }
    if details:
        status["details"] = details
    return status


def success_status(kind: Kind, obj: JSON) -> JSON:
    """The `Status` a DELETE answers with once the object is gone."""
    details = _details(kind, obj["metadata"]["name"])
    details["uid"] = obj["metadata"].get("uid", "")
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}


class ApiError(Exception):
    """An API failure; `status` is the `Status` object to send."""

    def __init__(self, status: JSON) -> None:
        super().__init__(status.get("message", ""))
        self.status = status

    @property
    def code(self) -> int:
        return int(self.status["code"])


def _details(kind: Kind, name: str) -> JSON:
    details: JSON = {"name": name, "kind": kind.plural}
    if kind.group:
        details["group"] = kind.group
    return details


def not_found(kind: Kind, name: str) -> ApiError:
    message = f'{kind.qualified_resource} "{name}" not found'
    return ApiError(status_object(404, message, details=_details(kind, name)))


def already_exists(kind: Kind, name: str) -> ApiError:
    message = f'{kind.qualified_resource} "{name}" already exists'
    return ApiError(status_object(409, message, "AlreadyExists", _details(kind, name)))


STALE = "the object has been modified; please apply your changes to the latest version and try again"


def conflict(kind: Kind, name: str, why: str = STALE) -> ApiError:
    message = f'Operation cannot be fulfilled on {kind.qualified_resource} "{name}": {why}'
    return ApiError(status_object(409, message, "Conflict", _details(kind, name)))


def bad_request(message: str) -> ApiError:
    return ApiError(status_object(400, message))


def internal_error(message: str) -> ApiError:
    return ApiError(status_object(500, message, details={"causes": [{"message": message}]}))


def expired(message: str) -> ApiError:
    return ApiError(status_object(410, message))


@dataclass(frozen=True)
class FieldError:
    """One `field.Error`: `cause` is the StatusCause reason (`FieldValueInvalid`, ...)."""

    cause: str
    field: str
    body: str

    def __str__(self) -> str:
        return f"{self.field}: {self.body}"


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return json.dumps(value, sort_keys=True)


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", path, f"Invalid value: {_show(value)}: {detail}")


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", path, "Required value" + (f": {detail}" if detail else ""))


def too_long(path: str, limit: int) -> FieldError:
    return FieldError("FieldValueTooLong", path, f"Too long: may not be more than {limit} bytes")


def too_many(path: str, actual: int, limit: int) -> FieldError:
    return FieldError("FieldValueTooMany", path, f"Too many: {actual}: must have at most {limit} items")


def not_supported(path: str, value: str, supported: Sequence[str]) -> FieldError:
    allowed = ", ".join(json.dumps(s) for s in supported)
    return FieldError("FieldValueNotSupported", path, f"Unsupported value: {_show(value)}: supported values: {allowed}")


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", path, f"Duplicate value: {_show(value)}")


def forbidden(path: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", path, f"Forbidden: {detail}")


def invalid(kind: Kind, name: str, errors: Sequence[FieldError]) -> ApiError:
    """422 Unprocessable Entity, shaped like `apierrors.NewInvalid`."""
    return invalid_of(kind.kind, kind.group, name, errors)


def invalid_of(kind: str, group: str, name: str, errors: Sequence[FieldError]) -> ApiError:
    aggregate = str(errors[0]) if len(errors) == 1 else "[" + ", ".join(str(e) for e in errors) + "]"
    causes = [{"reason": e.cause, "message": e.body, "field": e.field} for e in errors]
    details: JSON = {"name": name, "kind": kind, "causes": causes}
    if group:
        details["group"] = group
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(status_object(422, f'{qualified} "{name}" is invalid: {aggregate}', "Invalid", details))
