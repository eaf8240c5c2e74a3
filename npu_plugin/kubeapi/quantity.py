"""Kubernetes resource quantities, as far as memory sizes need them (pure)."""

from __future__ import annotations

import re

_SUFFIXES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}
_QUANTITY = re.compile(r"^([0-9]+)(|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)$")
_BINARY = (("Ei", 2**60), ("Pi", 2**50), ("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10))


def parse_bytes(value: object) -> int:
    """`64Gi` → 68719476736; an int is already bytes. Raises ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"expected a quantity like 64Gi or a byte count, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a memory size cannot be negative, got {value}")
        return value
    if isinstance(value, str):
        match = _QUANTITY.match(value.strip())
        if match:
            return int(match.group(1)) * _SUFFIXES[match.group(2)]
    raise ValueError(f"expected a quantity like 64Gi or a byte count, got {value!r}")


def format_bytes(count: int) -> str:
    """The shortest exact binary quantity: 68719476736 → `64Gi`; 1000 → `1000`."""
    for suffix, factor in _BINARY:
        if count and count % factor == 0:
            return f"{count // factor}{suffix}"
    return str(count)
