"""`field.Error`s and the 422 Invalid `Status` that carries them, worded as kube-apiserver words
them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from npu_plugin.sim._fakeapi.kinds import JSON, Kind
from npu_plugin.sim._fakeapi.status import ApiError, status_object


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


def not_found(path: str, value: Any) -> FieldError:
    return FieldError("FieldValueNotFound", path, f"Not found: {_show(value)}")


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
