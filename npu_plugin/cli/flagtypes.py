"""The flags' value types: each checks a command-line or environment value and raises
`argparse.ArgumentTypeError` saying what is allowed."""

from __future__ import annotations

import argparse
import ipaddress
import math
import os
import re
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from npu_plugin.ascend.shares import SHARE_COUNT_MAX, SHARE_COUNT_MIN
from npu_plugin.ascend.vnpu import TEMPLATE_NAME

E = TypeVar("E", bound=StrEnum)

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESOURCE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?/[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,127}$")


TRUE_WORDS, FALSE_WORDS = frozenset({"1", "true", "yes", "on"}), frozenset({"0", "false", "no", "off", ""})


# Value checkers: raise argparse.ArgumentTypeError with what is allowed.
def boolean(value: str) -> bool:
    """true/false (also yes/no, on/off, 1/0), any case."""
    word = value.strip().lower()
    if word not in TRUE_WORDS | FALSE_WORDS:
        raise argparse.ArgumentTypeError(f"{value!r} is not true or false")
    return word in TRUE_WORDS


def matching(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """An argparse type that accepts values of `pattern` (at most 253 characters), naming `what`
    otherwise."""

    def check(value: str) -> str:
        if len(value) > 253 or not pattern.match(value):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return value

    return check


MIN_KUBERNETES_MINOR = 34


def one_of(kind: type[E], normalize: Callable[[str], str] = str) -> Callable[[str], E]:
    """An argparse type for a StrEnum, naming the allowed values when `value` is none of them."""

    def check(value: str) -> E:
        try:
            return kind(normalize(value))
        except ValueError:
            allowed = ", ".join(member.value for member in kind)
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {allowed}") from None

    return check


def kubernetes_minor(value: str) -> int:
    """An argparse type for a Kubernetes version `1.Y` this plugin serves (1.34 or later): the
    minor, Y."""
    match = re.fullmatch(r"v?1\.([1-9][0-9]*)", value.strip())
    if match is None or int(match.group(1)) < MIN_KUBERNETES_MINOR:
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a Kubernetes version 1.{MIN_KUBERNETES_MINOR} or later, like 1.35"
        )
    return int(match.group(1))


def among(values: Sequence[str], normalize: Callable[[str], str] = str) -> Callable[[str], str]:
    """An argparse type for a fixed set of words, naming them when `value` is none of them."""

    def check(value: str) -> str:
        if normalize(value) not in values:
            raise argparse.ArgumentTypeError(f"{value!r} is not one of {', '.join(values)}")
        return normalize(value)

    return check


def _number(kind: Callable[[str], Any], low: float, high: float | None, what: str) -> Callable[[str], Any]:
    def check(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}") from None
        if number < low or (high is not None and number > high) or math.isnan(number):
            raise argparse.ArgumentTypeError(f"{value!r} is not {what}")
        return number

    return check


def address(value: str) -> str:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an IP address (e.g. 0.0.0.0 or 127.0.0.1)") from None
    return value


def absolute_path(value: str) -> Path:
    """A path flag, made absolute against the working directory at start: a relative socket directory
    would reach gRPC as `unix://dir/x.sock`, whose `dir` is read as a host name."""
    # Lexical, as the shell meant it; resolve() would follow symlinks.
    return Path(os.path.abspath(value))  # noqa: PTH100


def non_empty(value: str) -> str:
    if not value.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return value


def resource_name_or_auto(value: str) -> str:
    return value if value == "auto" else resource_name(value)


def template_names(value: str) -> frozenset[str]:
    """`--vnpu-templates`: a comma list of driver template names (`vir05_1c_16g,vir10_3c_32g`)."""
    names = [name.strip() for name in value.split(",")]
    for name in names:
        if not TEMPLATE_NAME.fullmatch(name):
            raise argparse.ArgumentTypeError(
                f"{name!r} is not a vNPU template name like vir05_1c_16g (a comma list of them)"
            )
    return frozenset(names)


dns_subdomain = matching(DNS_SUBDOMAIN, "a DNS subdomain (lower-case letters, digits, '-' and '.')")
resource_name = matching(RESOURCE_NAME, "an extended resource name like huawei.com/Ascend910, or auto")
safe_name = matching(_SAFE_NAME, "made of letters, digits, '-', '_' and '.' (it becomes part of a file name)")
port = _number(int, -1, 65535, "a port number from 0 to 65535, or -1 for off")
positive_seconds = _number(float, 0.01, 86400, "a number of seconds from 0.01 to 86400")
seconds = _number(float, 0, 86400, "a number of seconds from 0 to 86400")
threshold = _number(int, 1, 1000, "a whole number from 1 to 1000")
share_count = _number(
    int, SHARE_COUNT_MIN, SHARE_COUNT_MAX, f"a whole number of shares from {SHARE_COUNT_MIN} to {SHARE_COUNT_MAX}"
)
