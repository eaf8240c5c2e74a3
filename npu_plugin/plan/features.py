"""What each Kubernetes release turns on by default for the DRA features `plan` checks (pure).

The API server does not publish its feature gates to a reader with list/get on objects, so a gate's
state is inferred from the release's default and said to be inferred, unless a stored object shows
it (a ResourceSlice keeps shared counters only while DRAPartitionableDevices is on, and device
taints only while DRADeviceTaints is on: the server drops them on write otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass

DRA_FLOOR = (1, 34)  # resource.k8s.io/v1, GA


@dataclass(frozen=True, slots=True)
class Feature:
    gate: str
    purpose: str
    default_on_from: int  # the first 1.x minor where the gate is on by default
    stages: tuple[tuple[int, str], ...]  # (minor, stage) from that minor on


EXTENDED_RESOURCE = Feature(
    "DRAExtendedResource",
    "a DeviceClass extendedResourceName (KEP-5004) serving unchanged pods",
    36,
    ((34, "alpha"), (36, "beta"), (37, "GA")),
)
PARTITIONABLE = Feature(
    "DRAPartitionableDevices", "dynamic vNPUs (partitionable devices)", 36, ((33, "alpha"), (36, "beta"))
)
DEVICE_TAINTS = Feature(
    "DRADeviceTaints", "device taints (--unhealthy-policy taint)", 36, ((33, "alpha"), (36, "beta"), (37, "GA"))
)


@dataclass(frozen=True, slots=True)
class GateState:
    on: bool
    how: str  # "on by default in 1.36 (beta), inferred" ...


def stage(feature: Feature, minor: int) -> str:
    found = "unknown"
    for since, name in feature.stages:
        if minor >= since:
            found = name
    return found


def gate_state(feature: Feature, version: tuple[int, int], observed: bool | None = None) -> GateState:
    """The gate on a component of `version`: observed when a stored object shows it, else the
    release default (inferred)."""
    release = f"{version[0]}.{version[1]}"
    if observed is not None:
        return GateState(observed, f"{'on' if observed else 'off'} in {release}, seen in stored ResourceSlices")
    on = version >= (1, feature.default_on_from)
    how = f"{'on' if on else 'off'} by default in {release} ({stage(feature, version[1])})"
    return GateState(on, f"{how}, inferred: gates are not readable")


def enable_hint(feature: Feature) -> str:
    return f"--feature-gates={feature.gate}=true"
