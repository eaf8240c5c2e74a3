"""What the API server does with device taints: whether it keeps them (DRADeviceTaints: alpha and
off in Kubernetes 1.34 and 1.35, on from 1.36) and whether it knows the effect `None` (1.35+).

Asked only once a device needs a taint (a healthy node never asks): the version from `/version`
and, with `--unhealthy-policy auto`, a dry-run create of a probe slice whose device carries a taint;
the write strategy drops taints while the gate is off. Asked again after the API server restarted
(the slice watch was cut short: an upgrade may have turned the gate on). Every slice write is read
back too: a stored slice that lost its taints switches to remove at once (auto and taint alike:
a write the server alters is never repeated in a loop).
"""

from __future__ import annotations

import logging

from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra.probes import FieldGate, lost_device_field, probe_slice
from npu_plugin.dra.slices import SliceSettings
from npu_plugin.dra.taints import NONE_EFFECT_FROM_MINOR, TaintRules
from npu_plugin.kubeapi.protocol import KubeApi, ResourceSlice, StoredSlice

log = logging.getLogger(__name__)
GATE = "DRADeviceTaints"


def probe_taint(settings: SliceSettings) -> ResourceSlice:
    """A probe slice with one device that carries a taint."""
    taint = {"key": f"{settings.driver}/probe", "value": "probe", "effect": "NoSchedule"}
    device = {"name": "probe", "attributes": {}, "capacity": {}, "taints": [taint]}
    return probe_slice(settings, devices=[device])  # type: ignore[list-item]


def lost_taints(written: ResourceSlice, stored: StoredSlice) -> bool:
    """Whether the API server dropped taints from a slice we wrote (the gate is off)."""
    return lost_device_field(written, stored, "taints")


def _kept_taint(stored: StoredSlice) -> bool:
    devices = stored["spec"].get("devices") or []
    return bool(devices and devices[0].get("taints"))


class TaintGate:
    """The policy in force and the taint rules the server accepts; blocking calls, from the
    publisher's thread."""

    def __init__(self, api: KubeApi, policy: UnhealthyPolicy) -> None:
        self._api, self._policy = api, policy
        self.minor: int | None = None
        self._field = FieldGate(
            api,
            gate=GATE,
            what="device taint",
            probe_body=probe_taint,
            kept_in=_kept_taint,
            on_text="unhealthy devices stay in the slice with taints that say why",
            off_text=lambda: (
                f"unhealthy devices leave the slice (--unhealthy-policy {self._policy} acts as remove); turn the "
                "feature gate on in kube-apiserver and kube-scheduler to keep them tainted"
            ),
        )

    @property
    def kept(self) -> bool | None:
        """None until probed or read back."""
        return self._field.kept

    @property
    def known(self) -> bool:
        return self.minor is not None

    @property
    def policy(self) -> UnhealthyPolicy:
        """remove or taint: auto resolved by what the server does (remove until it has been asked);
        taint until a written slice lost its taints."""
        if self._policy is UnhealthyPolicy.AUTO:
            return UnhealthyPolicy.TAINT if self.kept else UnhealthyPolicy.REMOVE
        return UnhealthyPolicy.REMOVE if self.kept is False else self._policy

    def rules(self, base: TaintRules) -> TaintRules:
        return TaintRules(none_effect=(self.minor or 0) >= NONE_EFFECT_FROM_MINOR, fault_policy=base.fault_policy)

    def refresh(self, settings: SliceSettings) -> None:
        """Read the version, and with auto probe whether taints are kept."""
        _, self.minor = self._api.server_version()
        if self._policy is UnhealthyPolicy.AUTO:
            self._field.refresh(settings)

    def stripped(self) -> None:
        """A slice we wrote came back without its taints."""
        self._field.stripped()
