"""Which template `simulate --vnpu dynamic` asks for on each profile, or why it skips the vNPU steps (pure)."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.auto import discover, open_backend
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cli.simulate import VnpuDemo, vnpu_demo
from npu_plugin.inventory.vnpu_plans import ChipPlan, VnpuReader

ALL = range(8)


def plans(profile: str) -> dict[int, ChipPlan]:
    """How the daemon serves the profile's chips under --vnpu dynamic, as `simulate` reads them."""
    backend = open_backend(BackendOptions(kind=BackendKind.FAKE, fake_profile=profile))
    try:
        assert isinstance(backend, VnpuBackend)
        return VnpuReader(backend, VnpuMode.DYNAMIC).read(discover(backend))
    finally:
        backend.close()


@pytest.mark.parametrize(
    ("profile", "dra_owned", "expected"),
    [
        ("atlas-800t-a2", ALL, VnpuDemo("vir05_1c_16g")),
        ("atlas-800t-a2", {6, 7}, VnpuDemo("vir05_1c_16g")),
        ("atlas-300i-pro", ALL, VnpuDemo("vir01")),
        ("atlas-800-9000", ALL, VnpuDemo(None, "Ascend 910 (910A) supports static vNPUs only")),
        (
            "atlas-300i-duo",
            {2, 3},
            VnpuDemo(None, "Atlas 300I Duo (two 310P dies per card) supports static vNPUs only"),
        ),
        ("atlas-800t-a2", set(), VnpuDemo(None, "no chip served by DRA reports vNPU templates")),
    ],
)
def test_the_demo_template_or_the_reason_there_is_none(profile: str, dra_owned: set[int], expected: VnpuDemo) -> None:
    assert vnpu_demo(plans(profile), dra_owned) == expected
