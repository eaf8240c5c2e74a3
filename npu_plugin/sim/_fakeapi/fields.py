"""Equality field selectors on the fields the daemon and the simulators select by (pure
functions)."""

from __future__ import annotations

from collections.abc import Callable

from npu_plugin.sim._fakeapi.kinds import JSON
from npu_plugin.sim._fakeapi.status import bad_request

Matcher = Callable[[JSON], bool]
_PATHS = {
    "metadata.name": ("metadata", "name"),
    "metadata.namespace": ("metadata", "namespace"),
    "spec.nodeName": ("spec", "nodeName"),
    "spec.driver": ("spec", "driver"),
}


def _value(obj: JSON, path: tuple[str, ...]) -> object:
    value: object = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def field_matcher(field_selector: str, label_selector: str) -> Matcher:
    """Objects whose fields equal every `key=value` term; other selectors are refused with 400."""
    if label_selector:
        raise bad_request("label selectors are not served by this fake API server")
    terms: list[tuple[tuple[str, ...], str]] = []
    for term in filter(None, field_selector.split(",")):
        key, _, value = term.replace("==", "=").partition("=")
        if key not in _PATHS or "!" in key:
            raise bad_request(f'field selector "{term}" is not served: only {", ".join(_PATHS)} with "="')
        terms.append((_PATHS[key], value))
    return lambda obj: all(_value(obj, path) == value for path, value in terms)
