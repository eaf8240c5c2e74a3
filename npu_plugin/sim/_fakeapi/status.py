"""Kubernetes `Status` objects, and the exception that carries them to the HTTP layer."""

from __future__ import annotations

from npu_plugin.sim._fakeapi.kinds import JSON, Kind

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
