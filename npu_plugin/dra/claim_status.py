"""`--claim-status`: after a claim is prepared, one server-side apply of `status.devices` for the
driver's devices (a Ready condition, what the container sees and the chip's network identity:
device IP and, on super-pod hardware, super pod, server index and rack); removed at Unprepare.

Writes run on one worker thread in order, after the kubelet has its answer: a slow or refused write
never delays or fails a Prepare. A write the API server refuses for want of permission (RBAC
`resourceclaims/status` patch, from Kubernetes 1.36 also `resourceclaims/driver`
`associated-node:patch`) is logged once per missing permission and counted.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any, Literal

from npu_plugin.ascend.container_edits import visible_devices
from npu_plugin.ascend.device import Device
from npu_plugin.dra.checkpoint import PreparedDevice
from npu_plugin.dra.prepare_results import ClaimRef, cdi_key, requests_of
from npu_plugin.dra.slices import network_attributes
from npu_plugin.errors import KubeApiError
from npu_plugin.kubeapi.protocol import KubeApi

log = logging.getLogger(__name__)
API_VERSION = "resource.k8s.io/v1"
READY = "Ready"
StatusResult = Literal["success", "refused", "error"]
# 1.36+: `changing status.devices requires resource="resourceclaims/driver", verb="[...]"`.
_DRIVER_PERMISSION = re.compile(r'requires (resource="resourceclaims/driver", verb="[^"]*")')


def network_data(device: Device | None) -> dict[str, Any]:
    """The chip's network identity as plain values (`deviceIP`, `superPodId`, `serverIndex`,
    `rackId`), each only when known: what the slice publishes as attributes (pure)."""
    if device is None:
        return {}
    return {name: next(iter(value.values())) for name, value in network_attributes(device).items()}


def device_statuses(
    driver: str,
    devices: Sequence[PreparedDevice],
    now: str,
    device_of: Callable[[int], Device | None] = lambda _physical_id: None,
) -> list[dict[str, Any]]:
    """`status.devices[]` for a prepared claim's devices (pure); `device_of` gives each chip's
    inventory record, whose network identity joins the data."""
    whole, virtual = requests_of(devices)
    entries = []
    for device in devices:
        request = device.request_names[0]
        data: dict[str, Any] = {"physicalId": device.physical_id, **network_data(device_of(device.physical_id))}
        if device.vnpu is None:
            data["visibleDevices"] = visible_devices(whole[cdi_key(request, device.device_name, device.share_id)])
        else:
            data |= {
                "visibleDevices": visible_devices(virtual[request]),
                "vnpuId": device.vnpu.vnpu_id,
                "vnpuTemplate": device.vnpu.template,
            }
        condition = {
            "type": READY,
            "status": "True",
            "reason": "Prepared",
            "message": "prepared by the npu-plugin on this node",
            "lastTransitionTime": now,
        }
        entry = {"driver": driver, "pool": device.pool_name, "device": device.device_name}
        # The API server accepts a share's entry only under its allocation's shareID.
        if device.share_id is not None:
            entry["shareID"] = device.share_id
        entries.append({**entry, "conditions": [condition], "data": data})
    return entries


def apply_body(ref: ClaimRef, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """The apply configuration: what this field manager wants `status.devices` to hold of ours."""
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {"name": ref.name, "namespace": ref.namespace},
        "status": {"devices": entries},
    }


def missing_permission(error: KubeApiError) -> str | None:
    """The permission a refused status write lacks, or None when it was refused for another
    reason."""
    if error.status == 403:
        return 'resource="resourceclaims/status", verb="patch"'
    if error.status == 422 and (match := _DRIVER_PERMISSION.search(str(error))):
        return match.group(1)
    return None


class ClaimStatusReporter:
    """Applies and removes claims' device status on its own thread; never raises."""

    def __init__(
        self,
        api: KubeApi,
        driver: str,
        *,
        on_result: Callable[[StatusResult], None] = lambda _result: None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        device_of: Callable[[int], Device | None] = lambda _physical_id: None,
    ) -> None:
        """`device_of` looks a chip up in the inventory (its device IP goes into the data)."""
        self._api, self._driver, self._device_of = api, driver, device_of
        self._on_result, self._clock = on_result, clock
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="claim-status")
        self._said: set[str] = set()

    def prepared(self, ref: ClaimRef, devices: Sequence[PreparedDevice]) -> None:
        now = self._clock().strftime("%Y-%m-%dT%H:%M:%SZ")
        body = apply_body(ref, device_statuses(self._driver, devices, now, self._device_of))
        self._executor.submit(self._write, ref, body, "write")

    def unprepared(self, ref: ClaimRef) -> None:
        self._executor.submit(self._write, ref, apply_body(ref, []), "remove")

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    def _write(self, ref: ClaimRef, body: dict[str, Any], what: str) -> None:
        try:
            self._api.apply_claim_status(ref.namespace, ref.name, body, field_manager=self._driver)
        except KubeApiError as error:
            if what == "remove" and error.status == 404:
                self._on_result("success")  # the claim is gone, and its status with it
                return
            permission = missing_permission(error)
            self._on_result("refused" if permission else "error")
            if permission is None:
                log.warning(
                    "cannot %s the device status of claim %s: %s", what, ref.label, error, extra={"claim": ref.label}
                )
            elif permission not in self._said:
                self._said.add(permission)
                log.error(  # noqa: TRY400
                    "--claim-status: the API server refused a ResourceClaim status write: the service account "
                    "lacks %s (grant it as manifests/base/clusterrole.yaml does); Prepare is not affected, later "
                    "refusals are only counted",
                    permission,
                    extra={"claim": ref.label, "permission": permission},
                )
            return
        self._on_result("success")
