"""Where devices come from, as values: the backend kind and the options every backend reads."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from npu_plugin.backends.fake.profiles import PROFILES
from npu_plugin.errors import ConfigError


class BackendKind(StrEnum):
    """The discovery source; AUTO tries DCMI, then npu-smi."""

    AUTO = "auto"
    DCMI = "dcmi"
    NPU_SMI = "npu-smi"
    FAKE = "fake"


@dataclass(frozen=True, slots=True, kw_only=True)
class BackendOptions:
    """Where devices come from; checked on construction, so every instance is usable."""

    kind: BackendKind = BackendKind.AUTO
    fake_inventory: Path | None = None
    fake_profile: str | None = None
    npu_smi: str = "npu-smi"
    dcmi_library: str | None = None
    dev_root: Path = Path("/dev")
    fake_vnpu_state: Path | None = None  # the fake backend's simulated vNPU hardware

    def __post_init__(self) -> None:
        fake_given = self.fake_inventory is not None or self.fake_profile is not None
        if self.kind is BackendKind.FAKE and not fake_given:
            raise ConfigError(
                "--backend fake needs --fake-inventory PATH or --fake-profile NAME "
                f"(profiles: {', '.join(sorted(PROFILES))})"
            )
        if self.kind not in (BackendKind.FAKE, BackendKind.AUTO) and fake_given:
            raise ConfigError(f"--fake-inventory/--fake-profile only apply to --backend fake, not {self.kind}")
        if self.fake_vnpu_state is not None and not self.uses_fake:
            raise ConfigError(f"--fake-vnpu-state only applies to --backend fake, not {self.kind}")

    @property
    def uses_fake(self) -> bool:
        """`auto` with a fake inventory or profile given means the fake backend."""
        return self.kind is BackendKind.FAKE or (
            self.kind is BackendKind.AUTO and (self.fake_inventory is not None or self.fake_profile is not None)
        )
