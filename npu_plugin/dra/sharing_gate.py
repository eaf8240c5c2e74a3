"""Whether the API server keeps consumable capacity (DRAConsumableCapacity: alpha and off in
Kubernetes 1.34 and 1.35, beta and on from 1.36), the same way as taints (`taint_gate.py`): a
dry-run probe once a chip DRA serves is shared, again after the API server restarted, and every
slice write read back. The write strategy drops `allowMultipleAllocations` and every capacity's
`requestPolicy` while the gate is off. Fail closed: until the server has said it keeps them, a
shared chip is published as an ordinary exclusive device, so no two claims can each believe they
own it whole.
"""

from __future__ import annotations

from npu_plugin.dra.probes import FieldGate, lost_device_field, probe_slice
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.kubeapi.protocol import KubeApi, ResourceSlice, SliceDevice, StoredSlice

GATE = "DRAConsumableCapacity"
FIELD = "allowMultipleAllocations"


def probe_sharing(settings: SliceSettings) -> ResourceSlice:
    """A probe slice with one shared device and a capacity with a request policy."""
    device: SliceDevice = {
        "name": "probe",
        "attributes": {},
        "capacity": {"probe": {"value": "2", "requestPolicy": {"default": "1", "validRange": {"min": "1"}}}},
        "allowMultipleAllocations": True,
    }
    return probe_slice(settings, devices=[device])


def lost_sharing(written: ResourceSlice, stored: StoredSlice) -> bool:
    """Whether the API server dropped `allowMultipleAllocations` from a slice we wrote."""
    return lost_device_field(written, stored, FIELD)


def _kept(stored: StoredSlice) -> bool:
    devices = stored["spec"].get("devices") or []
    return bool(devices and devices[0].get(FIELD))


def sharing_gate(api: KubeApi) -> FieldGate:
    return FieldGate(
        api,
        gate=GATE,
        what=FIELD,
        probe_body=probe_sharing,
        kept_in=_kept,
        on_text="shared NPUs are published with consumable capacity (allowMultipleAllocations)",
        off_text=lambda: (
            "shared NPUs are published as ordinary exclusive devices, one claim each; turn the feature gate on in "
            "kube-apiserver and kube-scheduler to share them"
        ),
    )
