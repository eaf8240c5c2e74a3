"""A scheduler stand-in: allocates a ResourceClaim from a node's published ResourceSlices.

It does what kube-scheduler's structured allocator does for simple requests: only complete pools at
their newest generation, no tainted devices, no device another claim already holds, only the class's
driver, then CEL selectors (cel-python, imported only when a selector is given) — a CEL runtime error
fails the allocation, as it does in Kubernetes. The claim is created, then its status written with
`allocation.devices.results` [{request, driver, pool, device}] and a node selector.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from npu_plugin.quantity import parse_bytes
from npu_plugin.sim.rest import CLAIMS_PATH, SLICES_PATH, RestClient, claims_path

DEFAULT_CLASS = "npu.huawei.com"
DEFAULT_DRIVER = "npu.huawei.com"  # the DeviceClass's own selector, applied without CEL


class UnschedulableError(Exception):
    """No allocation satisfies the claim (or a selector failed to evaluate)."""


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of a claim; with `subrequest` it asks through firstAvailable, results name `name/subrequest`."""

    name: str
    count: int = 1
    selectors: tuple[str, ...] = ()
    subrequest: str = ""

    @property
    def result_name(self) -> str:
        return f"{self.name}/{self.subrequest}" if self.subrequest else self.name


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    driver: str
    pool: str
    entry: Mapping[str, Any]

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, str(self.entry.get("name"))


def published_devices(slices: Iterable[Mapping[str, Any]]) -> list[PublishedDevice]:
    """Untainted devices of complete pools at their newest generation, in slice order."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    devices = []
    for (driver, pool), specs in pools.items():
        newest = max(s["pool"]["generation"] for s in specs)
        current = [s for s in specs if s["pool"]["generation"] == newest]
        if len(current) != current[0]["pool"]["resourceSliceCount"]:
            continue  # incomplete pool: the scheduler waits for the rest
        devices += [
            PublishedDevice(driver, pool, d) for s in current for d in s.get("devices") or [] if not d.get("taints")
        ]
    return devices


def cel_device(device: PublishedDevice) -> dict[str, Any]:
    """The CEL `device` variable; capacities become byte counts (see `quantity` in `cel_matcher`)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.entry.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain or device.driver, {})[short] = next(iter(value.values()))
    capacity: dict[str, dict[str, int]] = {}
    for name, value in (device.entry.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or device.driver, {})[short] = parse_bytes(value["value"])
    return {"driver": device.driver, "attributes": attributes, "capacity": capacity, "allowMultipleAllocations": False}


def cel_matcher(expression: str) -> Callable[[PublishedDevice], bool]:
    """Evaluate a DRA selector; quantities compare as byte counts (`quantity("64Gi")`, `compareTo`)."""
    from celpy import Environment, celtypes
    from celpy.adapter import json_to_cel
    from celpy.celparser import CELParseError
    from celpy.evaluation import CELEvalError

    environment = Environment()
    functions: dict[str, Any] = {
        "quantity": lambda text: celtypes.IntType(parse_bytes(str(text))),
        "compareTo": lambda a, b: celtypes.IntType((a > b) - (a < b)),
        "isGreaterThan": lambda a, b: celtypes.BoolType(a > b),
        "isLessThan": lambda a, b: celtypes.BoolType(a < b),
        "asInteger": celtypes.IntType,
    }
    try:
        program = environment.program(environment.compile(expression), functions=functions)
    except CELParseError as error:
        raise UnschedulableError(f"CEL expression {expression!r} does not compile: {error}") from None

    def matches(device: PublishedDevice) -> bool:
        try:
            return bool(program.evaluate({"device": json_to_cel(cel_device(device))}))
        except CELEvalError as error:
            raise UnschedulableError(f"CEL runtime error on device {device.key[2]}: {expression}: {error}") from None

    return matches


def select(devices: Sequence[PublishedDevice], selectors: Iterable[str]) -> list[PublishedDevice]:
    chosen = list(devices)
    for expression in selectors:
        matches = cel_matcher(expression)
        chosen = [d for d in chosen if matches(d)]
    return chosen


def pick(
    devices: Sequence[PublishedDevice], requests: Sequence[DeviceRequest], class_selectors: Sequence[str]
) -> list[dict[str, str]]:
    """Allocation results: each request's first `count` matching devices no earlier request took."""
    taken: set[tuple[str, str, str]] = set()
    results = []
    eligible = select(devices, class_selectors)
    for request in requests:
        free = [d for d in select(eligible, request.selectors) if d.key not in taken][: request.count]
        if len(free) < request.count:
            raise UnschedulableError(f"request {request.name}: {len(free)} of {request.count} devices available")
        taken.update(d.key for d in free)
        results += [
            {"request": request.result_name, "driver": d.driver, "pool": d.pool, "device": d.key[2]} for d in free
        ]
    return results


def allocated_keys(claims: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    results = [
        r
        for c in claims
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    ]
    return {(r["driver"], r["pool"], r["device"]) for r in results}


def claim_body(namespace: str, name: str, requests: Sequence[DeviceRequest]) -> dict[str, Any]:
    def exactly(request: DeviceRequest, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": name, "deviceClassName": DEFAULT_CLASS, "count": request.count}
        if request.selectors:
            spec["selectors"] = [{"cel": {"expression": e}} for e in request.selectors]
        return spec

    def as_spec(request: DeviceRequest) -> dict[str, Any]:
        if request.subrequest:
            return {"name": request.name, "firstAvailable": [exactly(request, request.subrequest)]}
        body = exactly(request, request.name)
        return {"name": body.pop("name"), "exactly": body}

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name},
        "spec": {"devices": {"requests": [as_spec(r) for r in requests]}},
    }


def allocate_claim(
    client: RestClient,
    *,
    namespace: str,
    name: str,
    node: str,
    requests: Sequence[DeviceRequest],
    driver: str = DEFAULT_DRIVER,
    class_selectors: Sequence[str] = (),
) -> dict[str, Any]:
    """Create the claim and allocate it on `node` from `driver`'s devices; returns the stored claim (with its uid).

    `class_selectors` are further DeviceClass CEL selectors; without them (and without request selectors)
    cel-python is not needed, so `npu-plugin simulate` runs on an installation without the dev extras.
    """
    slices = client.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={node}"})["items"]
    taken = allocated_keys(client.request("GET", CLAIMS_PATH)["items"])
    free = [d for d in published_devices(slices) if d.driver == driver and d.key not in taken]
    results = pick(free, requests, class_selectors)
    claim = client.request("POST", claims_path(namespace), body=claim_body(namespace, name, requests))
    claim["status"] = {
        "allocation": {
            "devices": {"results": results},
            "nodeSelector": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            },
        }
    }
    stored: dict[str, Any] = client.request("PUT", claims_path(namespace, name) + "/status", body=claim)
    return stored
