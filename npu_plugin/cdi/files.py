"""The CDI spec files under --cdi-root: their names, writing and removing them.

`<driver>-device-plugin.json` is the device plugin's static spec, rewritten at every start;
`<driver>-claim_<claimUID>.json` is one prepared DRA claim's spec.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from npu_plugin.ascend.container_edits import HostLayout, Mount
from npu_plugin.ascend.device import Device
from npu_plugin.cdi.spec import claim_spec, spec_bytes, static_spec
from npu_plugin.errors import CdiError, describe_os_error
from npu_plugin.host.atomic import make_directories, remove_file, remove_leftovers, write_atomic

CDI_DIR_MODE = 0o755  # a --cdi-root we create: every container runtime, rootless ones too, reads it
# The checkpoint is the durable record (fsync'd); claim specs are derived from it: written
# atomically but not fsync'd. After a power loss, start-up removes files without a completed entry
# and the kubelet's next Prepare rewrites the others, so an fsync there would only buy latency. The
# static spec is rewritten at every start.
CDI_DURABLE = False
_CLAIM_INFIX = "-claim_"


def static_spec_path(cdi_root: Path, driver: str) -> Path:
    return cdi_root / f"{driver}-device-plugin.json"


def claim_spec_path(cdi_root: Path, driver: str, claim_uid: str) -> Path:
    return cdi_root / f"{driver}{_CLAIM_INFIX}{claim_uid}.json"


def _claim_pattern(driver: str) -> str:
    return f"{driver}{_CLAIM_INFIX}*.json"


def claim_spec_files(cdi_root: Path, driver: str) -> dict[str, Path]:
    """The claim specs present, by claim UID."""
    prefix = f"{driver}{_CLAIM_INFIX}"
    return {
        path.name.removeprefix(prefix).removesuffix(".json"): path for path in cdi_root.glob(_claim_pattern(driver))
    }


def write_static_spec(
    cdi_root: Path, driver: str, layout: HostLayout, devices: Sequence[Device], vnpu_ids: Sequence[int] = ()
) -> Path:
    """Write the static spec (creating --cdi-root); CdiError naming the path and errno when it
    cannot."""
    path = static_spec_path(cdi_root, driver)
    try:
        make_directories(cdi_root, CDI_DIR_MODE)
        write_atomic(path, spec_bytes(static_spec(driver, layout, devices, vnpu_ids)), durable=CDI_DURABLE)
    except OSError as error:
        raise CdiError(f"cannot write the static CDI spec: {describe_os_error(error, path)}") from None
    return path


def write_claim_spec(
    cdi_root: Path,
    driver: str,
    claim_uid: str,
    requests: Mapping[str, Sequence[int]],
    layout: HostLayout,
    *,
    virtual: Mapping[str, Sequence[int]] | None = None,
    mounts: Mapping[str, Mount] | None = None,
) -> None:
    spec = claim_spec(driver, claim_uid, requests, layout, virtual=virtual, mounts=mounts)
    write_atomic(claim_spec_path(cdi_root, driver, claim_uid), spec_bytes(spec), durable=CDI_DURABLE)


def remove_claim_spec(cdi_root: Path, driver: str, claim_uid: str) -> None:
    remove_file(claim_spec_path(cdi_root, driver, claim_uid), durable=CDI_DURABLE)


def remove_claim_spec_leftovers(cdi_root: Path, driver: str) -> list[Path]:
    """Temporary files a crash left while writing claim specs; callers hold the state lock."""
    return remove_leftovers(cdi_root, _claim_pattern(driver))
