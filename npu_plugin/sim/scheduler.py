"""A scheduler stand-in: allocates a ResourceClaim from a node's published ResourceSlices.

It does what kube-scheduler's structured allocator does for simple requests: only complete pools at
their newest generation, no tainted devices, no device another claim already holds, only the class's
driver, then CEL selectors (cel-python, imported only when a selector is given) — a CEL runtime
error fails the allocation, as it does in Kubernetes. Partitionable devices (KEP-4815): a device
that consumes counters fits only while its pool's counter sets have room, counting every allocated
claim; the first device that fits in slice and device order is taken; a pool whose devices name an
unknown counter set or counter is unusable; with DRAPartitionableDevices off, slices with counters
and devices consuming them are skipped, as the scheduler does. Consumable capacity (KEP-5075): a
device with `allowMultipleAllocations` goes to any number of claims while its capacities last; each
allocation consumes, per capacity, what its request asks (`capacity.requests`) or the policy's
default, rounded up to the policy's valid range and step (a request beyond the range does not fit),
and gets a fresh `shareID` and its `consumedCapacity`. The claim is created, then its status written
with `allocation.devices.results` [{request, driver, pool, device[, shareID, consumedCapacity]}] and a
node selector.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from npu_plugin.ascend.device import DEFAULT_DRIVER
from npu_plugin.kubeapi.quantity import parse_bytes
from npu_plugin.sim.rest import CLAIMS_PATH, SLICES_PATH, RestClient, claims_path

DEFAULT_CLASS = DEFAULT_DRIVER  # the whole-NPU DeviceClass is named after the driver; its selector, without CEL


class UnschedulableError(Exception):
    """No allocation satisfies the claim (or a selector failed to evaluate)."""


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """One request of a claim; with `subrequest` it asks through firstAvailable, results name
    `name/subrequest`."""

    name: str
    count: int = 1
    selectors: tuple[str, ...] = ()
    subrequest: str = ""
    all_devices: bool = False  # allocationMode: All (every matching device, together)
    capacity: Mapping[str, str] = field(default_factory=dict)  # capacity.requests, e.g. {"memory": "16Gi"}

    @property
    def result_name(self) -> str:
        return f"{self.name}/{self.subrequest}" if self.subrequest else self.name


CounterKey = tuple[str, str, str, str]  # driver, pool, counter set, counter


@dataclass(frozen=True, slots=True)
class PublishedDevice:
    driver: str
    pool: str
    entry: Mapping[str, Any]
    consumes: Mapping[CounterKey, Decimal] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return self.driver, self.pool, str(self.entry.get("name"))

    @property
    def shared(self) -> bool:
        return self.entry.get("allowMultipleAllocations") is True


Consumed = dict[tuple[str, str, str], dict[str, int]]  # device key → capacity → amount allocated


def _policy_amount(capacity: Mapping[str, Any], asked: str | None) -> int | None:
    """What one allocation consumes of a capacity: the request or the default (the whole capacity
    without either), rounded up to the policy; None when it is outside the policy."""
    total = parse_bytes(capacity["value"])
    policy = capacity.get("requestPolicy") or {}
    wanted = parse_bytes(asked) if asked is not None else parse_bytes(policy.get("default", capacity["value"]))
    if values := [parse_bytes(v) for v in policy.get("validValues") or []]:
        return next((v for v in values if v >= wanted), None)
    if (valid := policy.get("validRange")) is not None:
        low = parse_bytes(valid["min"])
        wanted = max(wanted, low)
        if step := parse_bytes(valid.get("step", "0")):
            wanted = low + -(-(wanted - low) // step) * step
        if valid.get("max") is not None and wanted > parse_bytes(valid["max"]):
            return None
    return wanted if wanted <= total else None


def share_of(device: PublishedDevice, request: DeviceRequest, consumed: Consumed) -> dict[str, int] | None:
    """What an allocation of a shared device for `request` consumes, or None when it does not fit
    (a capacity it asks for the device lacks, outside the policy, or beyond what is left)."""
    capacities = device.entry.get("capacity") or {}
    if any(name not in capacities for name in request.capacity):
        return None
    amounts: dict[str, int] = {}
    used = consumed.get(device.key, {})
    for name, capacity in capacities.items():
        amount = _policy_amount(capacity, request.capacity.get(name))
        if amount is None or used.get(name, 0) + amount > parse_bytes(capacity["value"]):
            return None
        amounts[name] = amount
    return amounts


def quantity(text: str) -> Decimal:
    """A counter value: a plain number or milli-units (`1500m`), which is all the driver writes."""
    return Decimal(text[:-1]) / 1000 if text.endswith("m") else Decimal(text)


def _consumption(driver: str, pool: str, device: Mapping[str, Any]) -> dict[CounterKey, Decimal]:
    return {
        (driver, pool, entry["counterSet"], name): quantity(counter["value"])
        for entry in device.get("consumesCounters") or []
        for name, counter in (entry.get("counters") or {}).items()
    }


def _pool_counters(driver: str, pool: str, specs: Sequence[Mapping[str, Any]]) -> dict[CounterKey, Decimal] | None:
    """The pool's counters; None when a set is named twice (an invalid pool)."""
    counters: dict[CounterKey, Decimal] = {}
    sets: set[str] = set()
    for spec in specs:
        for counter_set in spec.get("sharedCounters") or []:
            if counter_set["name"] in sets:
                return None
            sets.add(counter_set["name"])
            for name, counter in (counter_set.get("counters") or {}).items():
                counters[(driver, pool, counter_set["name"], name)] = quantity(counter["value"])
    return counters


def published_devices(slices: Iterable[Mapping[str, Any]], *, partitionable: bool = True) -> list[PublishedDevice]:
    """Untainted devices of complete, valid pools at their newest generation, in slice order."""
    return published(slices, partitionable=partitionable)[0]


def published(
    slices: Iterable[Mapping[str, Any]], *, partitionable: bool = True
) -> tuple[list[PublishedDevice], dict[CounterKey, Decimal]]:
    """The devices and counters the allocator sees; with `partitionable` False (the scheduler's gate
    off) no counters, and neither slices that share counters nor devices that consume them."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for item in slices:
        spec = item["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    devices: list[PublishedDevice] = []
    counters: dict[CounterKey, Decimal] = {}
    for (driver, pool), specs in pools.items():
        newest = max(s["pool"]["generation"] for s in specs)
        current = [s for s in specs if s["pool"]["generation"] == newest]
        if len(current) != current[0]["pool"]["resourceSliceCount"]:
            continue  # incomplete pool: the scheduler waits for the rest
        if not partitionable:
            current = [s for s in current if not s.get("sharedCounters")]
        totals = _pool_counters(driver, pool, current) if partitionable else {}
        if totals is None:
            continue
        found = [
            PublishedDevice(driver, pool, d, _consumption(driver, pool, d))
            for s in current
            for d in s.get("devices") or []
            if not d.get("taints") and (partitionable or not d.get("consumesCounters"))
        ]
        if any(key not in totals for d in found for key in d.consumes):
            continue  # a device names a counter the pool does not have: the pool is invalid
        devices += found
        counters |= totals
    return devices, counters


def remaining_counters(
    counters: Mapping[CounterKey, Decimal], devices: Sequence[PublishedDevice], taken: set[tuple[str, str, str]]
) -> dict[CounterKey, Decimal]:
    """What is left of each counter once the devices of allocated claims (`taken`) are counted."""
    left = dict(counters)
    for device in devices:
        if device.key in taken:
            for key, amount in device.consumes.items():
                left[key] -= amount
    return left


def _fits(device: PublishedDevice, left: Mapping[CounterKey, Decimal]) -> bool:
    return all(amount <= left.get(key, Decimal(0)) for key, amount in device.consumes.items())


def cel_device(device: PublishedDevice) -> dict[str, Any]:
    """The CEL `device` variable; capacities become byte counts (see `quantity` in
    `cel_matcher`)."""
    attributes: dict[str, dict[str, Any]] = {}
    for name, value in (device.entry.get("attributes") or {}).items():
        domain, _, short = name.rpartition("/")
        attributes.setdefault(domain or device.driver, {})[short] = next(iter(value.values()))
    capacity: dict[str, dict[str, int]] = {}
    for name, value in (device.entry.get("capacity") or {}).items():
        domain, _, short = name.rpartition("/")
        capacity.setdefault(domain or device.driver, {})[short] = parse_bytes(value["value"])
    return {
        "driver": device.driver,
        "attributes": attributes,
        "capacity": capacity,
        "allowMultipleAllocations": device.shared,
    }


def cel_matcher(expression: str) -> Callable[[PublishedDevice], bool]:
    """Evaluate a DRA selector; quantities compare as byte counts (`quantity("64Gi")`,
    `compareTo`)."""
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
    devices: Sequence[PublishedDevice],
    requests: Sequence[DeviceRequest],
    class_selectors: Sequence[str],
    counters: Mapping[CounterKey, Decimal] | None = None,
    consumed: Consumed | None = None,
) -> list[dict[str, Any]]:
    """Allocation results: each request's first matching devices, in order, that no earlier request
    took and whose counters still have room (`counters`: what is left of each; None when nothing
    consumes any); a shared device while its capacities have room (`consumed`: what other claims
    hold of each)."""
    taken: set[tuple[str, str, str]] = set()
    left = dict(counters or {})
    used: Consumed = {key: dict(amounts) for key, amounts in (consumed or {}).items()}
    results = []
    eligible = select(devices, class_selectors)
    for request in requests:
        matching = [d for d in select(eligible, request.selectors) if d.key not in taken]
        wanted = len(matching) if request.all_devices else request.count
        chosen: list[tuple[PublishedDevice, dict[str, int] | None]] = []
        for device in matching:
            if len(chosen) == wanted:
                break
            share = share_of(device, request, used) if device.shared else None
            asks_missing = any(name not in (device.entry.get("capacity") or {}) for name in request.capacity)
            if _fits(device, left) and (share is not None or not (device.shared or asks_missing)):
                chosen.append((device, share))
                for key, amount in device.consumes.items():
                    left[key] -= amount
                for name, taken_amount in (share or {}).items():
                    holding = used.setdefault(device.key, {})
                    holding[name] = holding.get(name, 0) + taken_amount
        if len(chosen) < wanted or not chosen:  # allocationMode All needs at least one device
            raise UnschedulableError(f"request {request.name}: {len(chosen)} of {wanted} devices available")
        taken.update(d.key for d, _share in chosen if not d.shared)
        results += [_result(request, d, share) for d, share in chosen]
    return results


def _result(request: DeviceRequest, device: PublishedDevice, share: dict[str, int] | None) -> dict[str, Any]:
    result: dict[str, Any] = {
        "request": request.result_name,
        "driver": device.driver,
        "pool": device.pool,
        "device": device.key[2],
    }
    if share is not None:
        result["shareID"] = str(uuid.uuid4())
        result["consumedCapacity"] = {name: str(amount) for name, amount in share.items()}
    return result


def consumed_capacity(claims: Iterable[Mapping[str, Any]]) -> Consumed:
    """What the allocated claims hold of each shared device."""
    consumed: Consumed = {}
    for result in _results(claims):
        if "shareID" in result:
            amounts = consumed.setdefault((result["driver"], result["pool"], result["device"]), {})
            for name, amount in (result.get("consumedCapacity") or {}).items():
                amounts[name] = amounts.get(name, 0) + parse_bytes(amount)
    return consumed


def _results(claims: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [
        r
        for c in claims
        for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    ]


def allocated_keys(claims: Iterable[Mapping[str, Any]]) -> set[tuple[str, str, str]]:
    """The devices allocated exclusively (a share leaves its device to others)."""
    return {(r["driver"], r["pool"], r["device"]) for r in _results(claims) if "shareID" not in r}


def claim_body(
    namespace: str, name: str, requests: Sequence[DeviceRequest], device_class: str = DEFAULT_CLASS
) -> dict[str, Any]:
    def exactly(request: DeviceRequest, name: str) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": name, "deviceClassName": device_class}
        spec |= {"allocationMode": "All"} if request.all_devices else {"count": request.count}
        if request.selectors:
            spec["selectors"] = [{"cel": {"expression": e}} for e in request.selectors]
        if request.capacity:
            spec["capacity"] = {"requests": dict(request.capacity)}
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


def what_was_seen(slices: Sequence[Mapping[str, Any]], claims: Sequence[Mapping[str, Any]], node: str) -> str:
    """The slices and claims an allocation looked at, for the message of a refusal."""

    def one_slice(item: Mapping[str, Any]) -> str:
        spec, pool = item["spec"], item["spec"]["pool"]
        devices = spec.get("devices") or []
        tainted = sum(1 for d in devices if d.get("taints"))
        return (
            f"{item['metadata'].get('name')} (driver {spec['driver']}, pool {pool['name']} generation "
            f"{pool['generation']} of {pool['resourceSliceCount']} slice(s), {len(devices)} device(s), "
            f"{tainted} tainted{', shared counters' if spec.get('sharedCounters') else ''})"
        )

    def one_claim(claim: Mapping[str, Any]) -> str:
        held = [r["device"] for r in _results([claim])]
        return f"{claim['metadata'].get('namespace')}/{claim['metadata'].get('name')} holding {held or 'nothing'}"

    return (
        f"node {node}'s slices: {'; '.join(map(one_slice, slices)) or 'none'}; "
        f"claims: {'; '.join(map(one_claim, claims)) or 'none'}"
    )


def allocate_claim(
    client: RestClient,
    *,
    namespace: str,
    name: str,
    node: str,
    requests: Sequence[DeviceRequest],
    driver: str = DEFAULT_DRIVER,
    class_selectors: Sequence[str] = (),
    device_class: str = DEFAULT_CLASS,
    partitionable: bool = True,
) -> dict[str, Any]:
    """Create the claim and allocate it on `node` from `driver`'s devices; returns the stored claim
    (with its uid).

    `class_selectors` are the DeviceClass's CEL selectors (`device_class` names it in the claim);
    without them (and without request selectors) cel-python is not needed, so `npu-plugin simulate`
    runs on an installation without the dev extras. `partitionable` is kube-scheduler's
    DRAPartitionableDevices gate.
    """
    slices = client.request("GET", SLICES_PATH, query={"fieldSelector": f"spec.nodeName={node}"})["items"]
    claims = client.request("GET", CLAIMS_PATH)["items"]
    taken = allocated_keys(claims)
    devices, counters = published(slices, partitionable=partitionable)
    left = remaining_counters(counters, devices, taken)
    free = [d for d in devices if d.driver == driver and d.key not in taken]
    try:
        results = pick(free, requests, class_selectors, left, consumed_capacity(claims))
    except UnschedulableError as error:
        raise UnschedulableError(f"{error}; {what_was_seen(slices, claims, node)}") from None
    body = claim_body(namespace, name, requests, device_class)
    claim = client.request("POST", claims_path(namespace), body=body)
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
