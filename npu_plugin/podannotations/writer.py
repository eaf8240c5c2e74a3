"""Writes MindCluster's pod annotations after an Allocate or a Prepare, off the kubelet's path.

Each job runs as a task of its own on the daemon's loop and never raises: Allocate and Prepare have
answered before it starts. A job finds its pod (after an Allocate, the container the kubelet's
PodResources API says holds the ids; after a Prepare, the claim's reservedFor pods), reads it (bound
to this node?), and patches the annotations with the pod's UID as precondition, so a pod deleted
and re-created under the same name is never annotated with another pod's devices. What can pass
(the kubelet not yet listing the container, a 409, a 5xx) is retried a bounded number of times with
the jittered back-off of `aio/backoff.py`; every outcome is one log line and one `on_result` count.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

from tenacity import AsyncRetrying, RetryError, retry_if_exception_type, stop_after_attempt

from npu_plugin.aio.backoff import BackoffPolicy, BackoffWait
from npu_plugin.ascend.device import Device
from npu_plugin.errors import KubeApiError
from npu_plugin.handover.podresources import holders_of, list_pod_resources
from npu_plugin.kubeapi.protocol import KubeApi, Pod
from npu_plugin.podannotations.mindcluster import (
    PREDICATE_TIME,
    USED_PREDICATE_TIME,
    AnnotatedDevice,
    NodeIdentity,
    PodRef,
    annotated,
    pod_annotations,
    server_of,
)

log = logging.getLogger(__name__)
# success: all three written; partial: a device has no IP, so the configuration was left out;
# no-pod: the kubelet never listed the container, or the pod is gone; ambiguous: several containers
# hold the ids; conflict: the pod kept changing (or was re-created); refused: RBAC or the admission
# policy said no; error: anything else, after the last attempt.
Result = Literal["success", "partial", "no-pod", "ambiguous", "conflict", "refused", "error"]
ATTEMPTS = 6
# The kubelet lists a container's devices a moment after Allocate returns: first retries come fast.
POLICY = BackoffPolicy(initial=0.2, maximum=5.0)


@dataclass(frozen=True, slots=True)
class Job:
    """What to write: for the pod holding `kubelet_ids` (`pod` None) or for `pod`; `extra` are
    further annotations (Volcano's used mark)."""

    what: str
    kubelet_ids: tuple[str, ...]
    real_ids: tuple[str, ...]
    devices: tuple[AnnotatedDevice, ...]
    pod: PodRef | None = None
    extra: Mapping[str, str] = field(default_factory=dict)
    server: NodeIdentity = field(default_factory=lambda: NodeIdentity(""))  # super-pod fields; the address is read


class _RetryableError(Exception):
    """This attempt failed in a way the next one may not: retried."""

    def __init__(self, result: Result, message: str) -> None:
        super().__init__(message)
        self.result = result


class _FinalError(Exception):
    """No attempt can succeed: the job ends with this result."""

    def __init__(self, result: Result, message: str) -> None:
        super().__init__(message)
        self.result = result


def node_address(node: Mapping[str, object]) -> str | None:
    """The node's InternalIP (MindCluster's server id), else its first address (pure)."""
    status = node.get("status")
    addresses = status.get("addresses") if isinstance(status, dict) else None
    if not isinstance(addresses, list):
        return None
    found = [a for a in addresses if isinstance(a, dict) and isinstance(a.get("address"), str)]
    internal = [a["address"] for a in found if a.get("type") == "InternalIP"]
    chosen = internal or [a["address"] for a in found]
    return str(chosen[0]) if chosen else None


class PodAnnotator:
    """Schedules annotation jobs (`submit`, from the loop's thread) and runs them until `close`."""

    def __init__(
        self,
        api: KubeApi,
        node_name: str,
        *,
        resource_name: str,
        pod_resources_socket: Path,
        on_result: Callable[[Result], None] = lambda _result: None,
        policy: BackoffPolicy = POLICY,
        attempts: int = ATTEMPTS,
    ) -> None:
        self._api, self._node_name, self._resource_name = api, node_name, resource_name
        self._socket, self._on_result = pod_resources_socket, on_result
        self._policy, self._attempts = policy, attempts
        self._host_ip: str | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def submit(self, job: Job) -> None:
        task = asyncio.get_running_loop().create_task(self._run(job), name="pod-annotations")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for every job submitted so far (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _run(self, job: Job) -> None:
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self._attempts),
            wait=BackoffWait(self._policy),
            retry=retry_if_exception_type(_RetryableError),
            reraise=False,
        )
        try:
            message: str = await retrying(self._attempt, job)
        except RetryError as error:
            failure = error.last_attempt.exception()
            result: Result = failure.result if isinstance(failure, _RetryableError) else "error"
            self._report(job, result, f"{failure} (after {self._attempts} attempts)")
        except _FinalError as final:
            self._report(job, final.result, str(final))
        except (OSError, ValueError) as error:  # never an unhandled task error: the job just ends
            self._report(job, "error", str(error))
        else:
            self._report(job, "partial" if message else "success", message)

    def _report(self, job: Job, result: Result, message: str) -> None:
        self._on_result(result)
        if result == "success":
            log.info("annotated the pod of %s", job.what, extra={"result": result})
        else:
            log.warning(
                "pod annotations for %s: %s: %s", job.what, result, message, extra={"result": result, "error": message}
            )

    async def _attempt(self, job: Job) -> str:
        """One try; the message says what was left out ("" for nothing)."""
        ref = job.pod or await self._holder(job)
        pod = await self._read(ref)
        bound = pod.get("spec", {}).get("nodeName")
        if bound != self._node_name:
            raise _FinalError("refused", f"pod {ref.label} is bound to node {bound!r}, not {self._node_name!r}")
        uid = pod["metadata"]["uid"]
        if ref.uid and uid != ref.uid:
            raise _FinalError("no-pod", f"pod {ref.label} was re-created (uid {uid}, not {ref.uid})")
        server = replace(job.server, host_ip=await self._address())
        wanted = pod_annotations(ref.name, server, job.kubelet_ids, job.real_ids, job.devices)
        annotations = {**wanted.values, **job.extra}
        try:
            await asyncio.to_thread(self._api.annotate_pod, ref.namespace, ref.name, annotations, uid=uid)
        except KubeApiError as error:
            raise _classified(error, ref) from None
        return (
            f"{wanted.without_configuration}: ascend-910-configuration left out" if wanted.without_configuration else ""
        )

    async def _holder(self, job: Job) -> PodRef:
        response = await list_pod_resources(self._socket)
        if response is None:
            raise _RetryableError("no-pod", f"the kubelet's PodResources API at {self._socket} cannot be read")
        holders = holders_of(response, self._resource_name, job.kubelet_ids)
        if not holders:
            raise _RetryableError("no-pod", f"no container holds {','.join(job.kubelet_ids)} (PodResources)")
        if len({(h.namespace, h.pod) for h in holders}) > 1:
            pods = ", ".join(sorted(f"{h.namespace}/{h.pod}" for h in holders))
            raise _FinalError("ambiguous", f"several pods hold {','.join(job.kubelet_ids)}: {pods}")
        return PodRef(holders[0].namespace, holders[0].pod)

    async def _read(self, ref: PodRef) -> Pod:
        try:
            return await asyncio.to_thread(self._api.get_pod, ref.namespace, ref.name)
        except KubeApiError as error:
            raise _classified(error, ref) from None

    async def _address(self) -> str:
        if self._host_ip is None:
            try:
                node = await asyncio.to_thread(self._api.get_node, self._node_name)
            except KubeApiError as error:
                raise _RetryableError("error", str(error)) from None
            address = node_address(node)
            if address is None:
                raise _FinalError("error", f"node {self._node_name} has no address in status.addresses")
            self._host_ip = address
        return self._host_ip


def _classified(error: KubeApiError, ref: PodRef) -> Exception:
    if error.status == 404:
        return _FinalError("no-pod", f"pod {ref.label} is gone: {error}")
    if error.status in (403, 422):
        return _FinalError("refused", str(error))
    if error.status == 409:
        return _RetryableError("conflict", str(error))
    return _RetryableError("error", str(error))


def allocate_job(kubelet_ids: Sequence[str], devices: Sequence[Device], pod: PodRef | None = None) -> Job:
    """The job after an Allocate: for the container the kubelet gave `kubelet_ids`, or for `pod`
    when Allocate knew it (Volcano's choice, which is then marked used)."""
    ordered = sorted(devices, key=lambda d: d.physical_id)
    return Job(
        f"Allocate of {','.join(kubelet_ids)}",
        tuple(kubelet_ids),
        tuple(d.dp_id for d in ordered),
        tuple(annotated(d) for d in ordered),
        pod,
        {PREDICATE_TIME: USED_PREDICATE_TIME} if pod is not None else {},
        server_of(ordered),
    )


def claim_jobs(prepared: Sequence[tuple[str, Sequence[PodRef], Sequence[Device]]]) -> list[Job]:
    """The jobs after a Prepare call (pure): one per pod the prepared claims are reserved for, with
    the NPUs of all of that pod's claims of the call (`(claim label, pods, devices)` each; a vNPU
    counts as its chip), so a pod with several claims is never annotated with only some."""
    claims: dict[PodRef, list[str]] = {}
    chips: dict[PodRef, dict[int, Device]] = {}
    for label, pods, devices in prepared:
        for pod in pods:
            claims.setdefault(pod, []).append(label)
            chips.setdefault(pod, {}).update((d.physical_id, d) for d in devices)
    jobs = []
    for pod, labels in claims.items():
        ordered = [chips[pod][i] for i in sorted(chips[pod])]
        ids = tuple(d.dp_id for d in ordered)
        what = f"claim{'s' if len(labels) > 1 else ''} {', '.join(labels)}"
        jobs.append(Job(what, ids, ids, tuple(annotated(d) for d in ordered), pod, server=server_of(ordered)))
    return jobs
