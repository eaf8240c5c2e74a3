"""Gate defaults per release, from the table in ../shared/REALCLUSTER.md §7."""

from __future__ import annotations

import pytest

from npu_plugin.plan.features import DEVICE_TAINTS, EXTENDED_RESOURCE, PARTITIONABLE, Feature, gate_state


@pytest.mark.parametrize(
    ("feature", "minor", "on", "how"),
    [
        (EXTENDED_RESOURCE, 34, False, "off by default in 1.34 (alpha), inferred: gates are not readable"),
        (EXTENDED_RESOURCE, 35, False, "off by default in 1.35 (alpha), inferred: gates are not readable"),
        (EXTENDED_RESOURCE, 36, True, "on by default in 1.36 (beta), inferred: gates are not readable"),
        (EXTENDED_RESOURCE, 37, True, "on by default in 1.37 (GA), inferred: gates are not readable"),
        (PARTITIONABLE, 35, False, "off by default in 1.35 (alpha), inferred: gates are not readable"),
        (PARTITIONABLE, 37, True, "on by default in 1.37 (beta), inferred: gates are not readable"),
        (DEVICE_TAINTS, 36, True, "on by default in 1.36 (beta), inferred: gates are not readable"),
        (DEVICE_TAINTS, 37, True, "on by default in 1.37 (GA), inferred: gates are not readable"),
    ],
)
def test_release_defaults_are_inferred_and_said_so(feature: Feature, minor: int, on: bool, how: str) -> None:
    assert gate_state(feature, (1, minor)) == (gate_state(feature, (1, minor)).__class__(on, how))


def test_a_gate_seen_in_stored_slices_is_not_inferred() -> None:
    state = gate_state(PARTITIONABLE, (1, 35), observed=True)
    assert (state.on, state.how) == (True, "on in 1.35, seen in stored ResourceSlices")
