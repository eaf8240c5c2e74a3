"""The device metadata file of a prepared claim, in KEP-5304's layout (DRA Device Attributes
Downward API), written by npu-plugin itself so that Kubernetes 1.34 to 1.37 alike get it.

One file per request, on the host under the driver's plugin directory
`<plugins>/<driver>/dra-device-metadata/<namespace>_<claim>/<request>/metadata.json`, bind-mounted
read-only by the request's device in the claim's CDI spec at
`/var/run/dra-device-attributes/<claim>/<request>/<driver>-metadata.json`. It holds, per device, the
slice attributes (ids, chip, topology, the device IP where the hardware has one) and, for a vNPU,
`vnpuId` and `vnpuTemplate`. Paths and documents are built here without I/O; `write_claim_metadata`
and `remove_claim_metadata` touch the files.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from npu_plugin.ascend.container_edits import Mount
from npu_plugin.ascend.device import Device
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.checkpoint import PreparedDevice
from npu_plugin.dra.prepare_results import ClaimRef
from npu_plugin.dra.slices import device_entry
from npu_plugin.host.atomic import make_directories, write_atomic

log = logging.getLogger(__name__)
API_VERSION = "metadata.resource.k8s.io/v1alpha1"
KIND = "DeviceMetadata"
DIRECTORY = "dra-device-metadata"
CONTAINER_ROOT = "/var/run/dra-device-attributes"
FILE_NAME = "metadata.json"
DIRECTORY_MODE = 0o755  # the container runtime (rootless ones too) reads the file to bind-mount it


def claim_directory(plugin_dir: Path, ref: ClaimRef) -> Path:
    return plugin_dir / DIRECTORY / f"{ref.namespace}_{ref.name}"


def request_file(plugin_dir: Path, ref: ClaimRef, request: str) -> Path:
    return claim_directory(plugin_dir, ref) / request / FILE_NAME


def container_file(driver: str, ref: ClaimRef, request: str) -> str:
    return f"{CONTAINER_ROOT}/{ref.name}/{request}/{driver}-metadata.json"


def device_document(driver: str, prepared: PreparedDevice, device: Device) -> dict[str, Any]:
    """One device: its name, driver, pool and attributes as the ResourceSlice publishes them."""
    entry = device_entry(driver, device, True, UnhealthyPolicy.REMOVE)
    attributes: dict[str, Any] = dict(entry["attributes"]) if entry is not None else {}
    if prepared.vnpu is not None:
        attributes["vnpuId"] = {"int": prepared.vnpu.vnpu_id}
        attributes["vnpuTemplate"] = {"string": prepared.vnpu.template}
    return {"name": prepared.device_name, "driver": driver, "pool": prepared.pool_name, "attributes": attributes}


def request_documents(
    driver: str, ref: ClaimRef, devices: Sequence[PreparedDevice], device_of: Callable[[int], Device | None]
) -> dict[str, dict[str, Any]]:
    """The metadata document of each request of a prepared claim (pure); a device the inventory
    no longer has is left out."""
    requests: dict[str, list[dict[str, Any]]] = {}
    for prepared in devices:
        device = device_of(prepared.physical_id)
        entries = requests.setdefault(prepared.request_names[0], [])
        if device is not None:
            entries.append(device_document(driver, prepared, device))
    return {
        request: {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": ref.name, "namespace": ref.namespace, "uid": ref.uid},
            "requests": [{"name": request, "devices": entries}],
        }
        for request, entries in requests.items()
    }


def metadata_mounts(plugin_dir: Path, driver: str, ref: ClaimRef, requests: Iterable[str]) -> dict[str, Mount]:
    """The mount each request's CDI device adds (pure)."""
    return {
        request: Mount(str(request_file(plugin_dir, ref, request)), container_file(driver, ref, request))
        for request in requests
    }


def write_claim_metadata(plugin_dir: Path, ref: ClaimRef, documents: Mapping[str, Mapping[str, Any]]) -> None:
    """Write every request's file (OSError when one cannot be)."""
    for request, document in documents.items():
        path = request_file(plugin_dir, ref, request)
        make_directories(path.parent, DIRECTORY_MODE)
        write_atomic(path, (json.dumps(document, indent=2) + "\n").encode(), durable=False)


def remove_claim_metadata(plugin_dir: Path, ref: ClaimRef) -> None:
    shutil.rmtree(claim_directory(plugin_dir, ref), ignore_errors=True)


def remove_orphans(plugin_dir: Path, keep: Iterable[tuple[str, str]]) -> list[Path]:
    """Remove the claim directories of claims not in `keep` (namespace, name): what a crash left."""
    kept = {f"{namespace}_{name}" for namespace, name in keep}
    root = plugin_dir / DIRECTORY
    removed = [path for path in (root.iterdir() if root.is_dir() else ()) if path.name not in kept]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    return removed
