"""The per-claim CDI spec DRA writes: one CDI device per (claim, request) (pure, plus file paths)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from npu_plugin.cdi import CdiDevice, qualified_name, render_spec
from npu_plugin.edits import HostLayout, container_edits


def claim_spec_path(cdi_root: Path, driver: str, claim_uid: str) -> Path:
    return cdi_root / f"{driver}-claim_{claim_uid}.json"


def cdi_device_name(claim_uid: str, request: str) -> str:
    return f"{claim_uid}-{request}"


def claim_spec(
    driver: str, claim_uid: str, requests: Mapping[str, Sequence[int]], layout: HostLayout
) -> dict[str, Any]:
    """Spec with a device per request whose edits expose exactly that request's NPUs."""
    devices = [
        CdiDevice(cdi_device_name(claim_uid, request), container_edits(layout, ids))
        for request, ids in sorted(requests.items())
    ]
    return render_spec(driver, devices)


def claim_cdi_id(driver: str, claim_uid: str, request: str) -> str:
    return qualified_name(driver, cdi_device_name(claim_uid, request))
