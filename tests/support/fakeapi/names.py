"""Name checks of `k8s.io/apimachinery/pkg/util/validation`, returning its messages (pure
functions)."""

from __future__ import annotations

import re

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN_FMT = _LABEL_FMT + r"(\." + _LABEL_FMT + ")*"
_QUALIFIED_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = f"({_QUALIFIED_FMT})?"
C_IDENTIFIER_FMT = "[A-Za-z_][A-Za-z0-9_]*"

_RE_LABEL = re.compile(_LABEL_FMT + r"\Z")
_RE_SUBDOMAIN = re.compile(_SUBDOMAIN_FMT + r"\Z")
_RE_QUALIFIED = re.compile(_QUALIFIED_FMT + r"\Z")
_RE_LABEL_VALUE = re.compile(_LABEL_VALUE_FMT + r"\Z")
_RE_C_IDENTIFIER = re.compile(C_IDENTIFIER_FMT + r"\Z")


def _max_len(limit: int) -> str:
    return f"must be no more than {limit} characters"


def dns1123_label(value: str) -> list[str]:
    msgs = [_max_len(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _RE_LABEL.match(value):
        msgs.append(
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
            f"start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
            f"validation is '{_LABEL_FMT}')"
        )
    return msgs


def dns1123_subdomain(value: str) -> list[str]:
    msgs = [_max_len(DNS1123_SUBDOMAIN_MAX)] if len(value) > DNS1123_SUBDOMAIN_MAX else []
    if not _RE_SUBDOMAIN.match(value):
        msgs.append(
            "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
            f"is '{_SUBDOMAIN_FMT}')"
        )
    return msgs


def qualified_name(value: str) -> list[str]:
    """`IsQualifiedName`: label keys, taint keys, annotation keys."""
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and "
            f"end with an alphanumeric character (e.g. 'MyName',  or 'my.name', regex used for validation is "
            f"'{_QUALIFIED_FMT}') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    msgs: list[str] = []
    if len(parts) == 2:
        prefix = parts[0]
        msgs += [f"prefix part {m}" for m in dns1123_subdomain(prefix)] if prefix else ["prefix part must be non-empty"]
    name = parts[-1]
    if not name:
        msgs.append("name part must be non-empty")
    elif len(name) > DNS1123_LABEL_MAX:
        msgs.append(f"name part {_max_len(DNS1123_LABEL_MAX)}")
    if not _RE_QUALIFIED.match(name):
        msgs.append(
            "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
            f"alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
            f"'{_QUALIFIED_FMT}')"
        )
    return msgs


def label_value(value: str) -> list[str]:
    msgs = [_max_len(DNS1123_LABEL_MAX)] if len(value) > DNS1123_LABEL_MAX else []
    if not _RE_LABEL_VALUE.match(value):
        msgs.append(
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
            "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', "
            f"regex used for validation is '{_LABEL_VALUE_FMT}')"
        )
    return msgs


def c_identifier(value: str) -> list[str]:
    if _RE_C_IDENTIFIER.match(value):
        return []
    return [
        "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric "
        f"characters or '_' (e.g. 'my_name',  or 'MY_NAME',  or 'MyName', regex used for validation is "
        f"'{C_IDENTIFIER_FMT}')"
    ]
