"""DcmiBackend's vNPU calls through real ctypes into the fake libdcmi.so
(tests/fakedcmi/fake_dcmi.c)."""

from __future__ import annotations

import logging
import re
import shutil
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Protocol

import pytest

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.device import Health
from npu_plugin.ascend.vnpu import ChipMode, ChipVnpu, Vnpu, VnpuTemplate
from npu_plugin.backends.base import VnpuBackend
from npu_plugin.backends.dcmi.backend import DcmiBackend
from npu_plugin.errors import BackendError, DcmiError, VnpuError, VnpuNotFoundError
from tests.support.fake_hardware import FakeDie, FakeHost, FakeResources, FakeTemplate, npu_smi_for

D = Decimal
GIB = 1 << 30
MIB = 1 << 20
# ascend-device-plugin#135's 910B3: 20 AI cores, about 60 GB to split, PNGD not reported.
B3_TOTALS = FakeResources(aic=20, aicpu=7, mem_mb=61440, vpc=9, venc=0, vdec=2, jpegd=24, jpege=4, pngd=-1)
VIR05 = FakeTemplate("vir05_1c_16g", FakeResources(5, 1, 15360, 2, 0, 0, 6, 1, 0), shown_gb=16)
VIR10 = FakeTemplate("vir10_3c_32g", FakeResources(10, 3, 30720, 4, 0, 1, 12, 2, 0), shown_gb=32)


def b3_host(vnpu_mode: int | None = 0) -> FakeHost:
    """Two 910B3 dies on cards 0 and 1 (physical ids 4 and 5); die 4 holds #135's two
    vir05_1c_16g."""
    dies = [FakeDie(card=card, dev=0, logic=card, phy=4 + card) for card in (0, 1)]
    return FakeHost(
        dies,
        vnpu_mode=vnpu_mode,
        vnpu_totals={4: B3_TOTALS, 5: B3_TOTALS},
        vnpu_templates=[VIR10, VIR05],
        vnpus=[(4, 164, "vir05_1c_16g"), (4, 165, "vir05_1c_16g")],
    )


class Opener(Protocol):
    def __call__(
        self, host: FakeHost, *, npu_smi: bool = True, variant: str = "current", lock_timeout: float = 15.0
    ) -> DcmiBackend: ...


@pytest.fixture
def open_host(fake_builds: dict[str, Path], config_path: Path, tmp_path: Path) -> Iterator[Opener]:
    opened: list[DcmiBackend] = []

    def opener(
        host: FakeHost, *, npu_smi: bool = True, variant: str = "current", lock_timeout: float = 15.0
    ) -> DcmiBackend:
        host.write(config_path)
        directory = tmp_path / f"lib{len(opened)}"
        directory.mkdir()
        library = shutil.copy2(fake_builds[variant], directory / "libdcmi.so")  # a fresh dlopen, fresh vNPU state
        executable = npu_smi_for(tmp_path / f"npu-smi{len(opened)}", host) if npu_smi else tmp_path / "no-npu-smi"
        backend = DcmiBackend(
            str(library), driver_version_file=tmp_path / "absent", npu_smi=str(executable), lock_timeout=lock_timeout
        )
        backend.discover()
        opened.append(backend)
        return backend

    yield opener
    for backend in opened:
        backend.close()


def test_the_backend_is_a_vnpu_backend(open_host: Opener) -> None:
    assert isinstance(open_host(b3_host()), VnpuBackend)


def test_chip_vnpu_reads_totals_and_vnpus_from_dcmi_and_templates_from_npu_smi(open_host: Opener) -> None:
    chip = open_host(b3_host()).chip_vnpu(4)

    assert chip == ChipVnpu(
        physical_id=4,
        mode=ChipMode.CONTAINER,
        totals={"aicore": D(20), "aicpu": D(7), "vpc": D(9), "venc": D(0), "vdec": D(2), "jpegd": D(24), "jpege": D(4)},
        templates=(
            VnpuTemplate(
                "vir10_3c_32g", 10, 32 * GIB, {"aicpu": D(3), "vpc": D(4), "vdec": D(1), "jpegd": D(12), "jpege": D(2)}
            ),
            VnpuTemplate("vir05_1c_16g", 5, 16 * GIB, {"aicpu": D(1), "vpc": D(2), "jpegd": D(6), "jpege": D(1)}),
        ),
        id_range=(164, 179),
        dynamic_supported=True,
        vnpus=(Vnpu(4, 164, "vir05_1c_16g"), Vnpu(4, 165, "vir05_1c_16g")),
    )


def test_without_npu_smi_only_existing_templates_and_no_dynamic(
    open_host: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    backend = open_host(b3_host(), npu_smi=False)

    with caplog.at_level(logging.WARNING, logger="npu_plugin.backends.dcmi.backend"):
        chip = backend.chip_vnpu(4)
        empty = backend.chip_vnpu(5)

    assert chip is not None
    assert empty is not None
    # the vNPU's own figures: the memory it was given, not the template's nominal 16 GB
    assert chip.templates == (
        VnpuTemplate("vir05_1c_16g", 5, 15360 * MIB, {"aicpu": D(1), "vpc": D(2), "jpegd": D(6), "jpege": D(1)}),
    )
    assert (chip.dynamic_supported, empty.templates, empty.dynamic_supported) == (False, (), False)
    (said,) = [r.getMessage() for r in caplog.records if "template" in r.getMessage()]
    assert said.startswith("DCMI has no template query and npu-smi cannot list them (npu-smi executable ")
    assert said.endswith("vNPUs are not created on demand, and only the templates of existing vNPUs are known")


@pytest.mark.parametrize(
    ("vnpu_mode", "variant", "mode"),
    [(1, "current", ChipMode.VM), (None, "current", ChipMode.CONTAINER), (0, "legacy", ChipMode.CONTAINER)],
    ids=["vm", "not supported", "not exported"],
)
def test_mode(
    open_host: Opener, caplog: pytest.LogCaptureFixture, vnpu_mode: int | None, variant: str, mode: ChipMode
) -> None:
    backend = open_host(b3_host(vnpu_mode), variant=variant)

    with caplog.at_level(logging.INFO, logger="npu_plugin.backends.dcmi.backend"):
        chips = [backend.chip_vnpu(4), backend.chip_vnpu(5)]

    assert [chip.mode if chip else None for chip in chips] == [mode, mode]
    assumed = [r for r in caplog.records if "container mode is assumed" in r.getMessage()]
    assert len(assumed) == (0 if vnpu_mode == 1 else 1)


def test_a_chip_the_driver_cannot_split_is_none(open_host: Opener) -> None:
    host = b3_host()
    del host.vnpu_totals[5]

    backend = open_host(host)

    assert backend.chip_vnpu(5) is None
    assert backend.list_vnpus(5) == []


def test_a_failing_total_query_is_a_dcmi_error(open_host: Opener) -> None:
    host = b3_host()
    host.fails.append("dcmi_get_device_info card 0 dev 0 -8005")

    with pytest.raises(
        DcmiError, match=r"dcmi_get_device_info\(card 0, device 0, 52, 1\) failed with error code -8005"
    ):
        open_host(host).chip_vnpu(4)


def test_an_undiscovered_chip_is_a_backend_error(open_host: Opener) -> None:
    with pytest.raises(BackendError, match="no NPU with physical id 9 was discovered"):
        open_host(b3_host()).chip_vnpu(9)


# ---- create and destroy


def test_create_then_list_then_destroy(open_host: Opener) -> None:
    backend = open_host(b3_host())

    assert backend.create_vnpu(4, "vir05_1c_16g", 170) == 170
    assert backend.list_vnpus(4) == [
        Vnpu(4, 164, "vir05_1c_16g"),
        Vnpu(4, 165, "vir05_1c_16g"),
        Vnpu(4, 170, "vir05_1c_16g"),
    ]
    backend.destroy_vnpu(4, 164)
    assert [v.vnpu_id for v in backend.list_vnpus(4)] == [165, 170]


def test_create_with_the_any_id_takes_the_drivers_choice(open_host: Opener) -> None:
    backend = open_host(b3_host())

    assert backend.create_vnpu(5, "vir10_3c_32g", 0xFFFFFFFF) == 180


@pytest.mark.parametrize(
    ("template", "vnpu_id", "code"),
    [
        ("vir99", 170, driver_codes.INVALID_PARAMETER),  # unknown template
        ("vir05_1c_16g", 164, driver_codes.INVALID_PARAMETER),  # id in use
        ("vir05_1c_16g", 180, driver_codes.INVALID_PARAMETER),  # another chip's id range
        ("vir10_3c_32g", 170, driver_codes.INNER_ERR),  # 10 AI cores left, taken twice below
        ("vir05_1c_16g_with_a_name_far_too_long", 170, driver_codes.INVALID_PARAMETER),
    ],
)
def test_refused_creates_carry_the_drivers_code(open_host: Opener, template: str, vnpu_id: int, code: int) -> None:
    backend = open_host(b3_host())
    if template == "vir10_3c_32g":
        backend.create_vnpu(4, template, 171)

    with pytest.raises(VnpuError) as raised:
        backend.create_vnpu(4, template, vnpu_id)

    assert raised.value.code == code
    assert str(raised.value).endswith(f"(DCMI {code})")


def test_create_in_vm_mode_is_not_permitted(open_host: Opener) -> None:
    with pytest.raises(VnpuError) as raised:
        open_host(b3_host(vnpu_mode=1)).create_vnpu(4, "vir05_1c_16g", 170)

    assert raised.value.code == driver_codes.OPER_NOT_PERMITTED


def test_an_injected_busy_destroy_is_a_vnpu_error(open_host: Opener) -> None:
    host = b3_host()
    host.fails.append("dcmi_set_destroy_vdevice -8020")

    with pytest.raises(
        VnpuError, match=r"dcmi_set_destroy_vdevice of vNPU 164 on card 0 device 0 failed \(DCMI -8020\)"
    ):
        open_host(host).destroy_vnpu(4, 164)


def test_destroying_a_missing_vnpu_is_not_found(open_host: Opener) -> None:
    with pytest.raises(VnpuNotFoundError) as raised:
        open_host(b3_host()).destroy_vnpu(4, 170)

    assert raised.value.code == driver_codes.DEVICE_NOT_EXIST


def test_destroy_all_id_is_refused_before_any_call(open_host: Opener) -> None:
    backend = open_host(b3_host())

    with pytest.raises(VnpuError, match="refusing to destroy vNPU 65535 on npu-4") as raised:
        backend.destroy_vnpu(4, 0xFFFF)

    assert raised.value.code == driver_codes.INVALID_PARAMETER
    # the fake, like the driver, would have destroyed both
    assert [v.vnpu_id for v in backend.list_vnpus(4)] == [164, 165]


# ---- a driver call that does not return


def _start_create(backend: DcmiBackend, physical_id: int, vnpu_id: int) -> tuple[threading.Thread, list[int]]:
    made: list[int] = []
    thread = threading.Thread(target=lambda: made.append(backend.create_vnpu(physical_id, "vir05_1c_16g", vnpu_id)))
    thread.start()
    return thread, made


def _busy_error(backend: DcmiBackend, physical_id: int) -> BackendError:
    """The error list_vnpus raises once the create started in another thread is in the library."""
    give_up = time.monotonic() + 10.0
    while time.monotonic() < give_up:
        try:
            backend.list_vnpus(physical_id)
        except BackendError as error:
            if "dcmi_create_vdevice" in str(error):  # not the instant between its taking the library and the call
                return error
    raise AssertionError("the create never held the library")


def _sample_within(backend: DcmiBackend, seconds: float) -> dict[int, Health]:
    """sample() run in a thread; fails the test when it has not answered after `seconds`."""
    answers: list[dict[int, Health]] = []
    thread = threading.Thread(target=lambda: answers.append(backend.sample()), daemon=True)
    thread.start()
    thread.join(seconds)
    assert answers, f"sample() did not answer within {seconds} s"
    return answers[0]


def test_a_hung_create_makes_health_unknown_and_reads_fail_naming_it_until_it_returns(
    open_host: Opener, hung_create: Path, caplog: pytest.LogCaptureFixture
) -> None:
    host = b3_host()
    host.hang = ("dcmi_create_vdevice", hung_create)
    backend = open_host(host, lock_timeout=0.2)
    creator, made = _start_create(backend, 5, 180)

    with caplog.at_level(logging.INFO, logger="npu_plugin.backends.dcmi.backend"):
        error = _busy_error(backend, 4)
        unknown = _sample_within(backend, 10.0)
        with pytest.raises(
            BackendError, match=r"^DCMI busy: dcmi_create_vdevice on npu-5 has not returned for [\d.]+ s"
        ):
            backend.chip_vnpu(4)
        with pytest.raises(BackendError, match="dcmi_create_vdevice on npu-5"):
            backend.destroy_vnpu(4, 164)
        hung_create.unlink()
        creator.join(10.0)
        healthy = backend.sample()

    assert re.fullmatch(
        r"DCMI busy: dcmi_create_vdevice on npu-5 has not returned for [\d.]+ s \(a hung driver\? .*\)", str(error)
    )
    assert unknown == {4: Health.UNKNOWN, 5: Health.UNKNOWN}
    assert made == [180]
    assert backend.list_vnpus(5) == [Vnpu(5, 180, "vir05_1c_16g")]
    assert healthy == {4: Health.OK, 5: Health.OK}
    said = [(r.levelno, r.getMessage()) for r in caplog.records]
    busy = [(level, m.split(" has not returned")[0]) for level, m in said if "DCMI busy" in m]
    assert busy == [(logging.WARNING, "DCMI busy: dcmi_create_vdevice on npu-5")]  # once, for four refusals
    assert [level for level, m in said if "dcmi_create_vdevice on npu-5 returned after" in m] == [logging.INFO]


def test_once_a_call_is_found_hung_later_callers_are_told_at_once(open_host: Opener, hung_create: Path) -> None:
    timeout = 3.0
    host = b3_host()
    host.hang = ("dcmi_create_vdevice", hung_create)
    backend = open_host(host, lock_timeout=timeout)
    creator, _ = _start_create(backend, 5, 180)
    _busy_error(backend, 4)

    began = time.monotonic()
    refusals = []
    for physical_id in (4, 5, 4, 5):
        with pytest.raises(BackendError, match="dcmi_create_vdevice on npu-5 has not returned") as raised:
            backend.list_vnpus(physical_id)
        refusals.append(raised.value)
    unknown = backend.sample()
    took = time.monotonic() - began
    hung_create.unlink()
    creator.join(10.0)

    assert took < timeout, f"four refusals and a sample took {took:.1f} s: they waited for the library"
    assert unknown == {4: Health.UNKNOWN, 5: Health.UNKNOWN}
    assert [v.vnpu_id for v in backend.list_vnpus(4)] == [164, 165]  # and after it returned, they wait again


def test_close_does_not_wait_for_a_hung_call(open_host: Opener, hung_create: Path) -> None:
    host = b3_host()
    host.hang = ("dcmi_create_vdevice", hung_create)
    backend = open_host(host, lock_timeout=0.2)
    creator, _ = _start_create(backend, 5, 180)
    _busy_error(backend, 4)

    closer = threading.Thread(target=backend.close, daemon=True)
    closer.start()
    closer.join(10.0)
    hung_create.unlink()
    creator.join(10.0)

    assert not closer.is_alive()
    with pytest.raises(BackendError, match="is closed"):
        backend.list_vnpus(4)
