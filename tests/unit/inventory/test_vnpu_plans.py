"""Each chip's vNPU plan: templates checked, --vnpu-templates applied, dynamic, static or whole
decided."""

from __future__ import annotations

import logging
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from npu_plugin.ascend.vnpu import ChipMode, ChipVnpu, Vnpu, VnpuMode, VnpuOrigin, VnpuTemplate
from npu_plugin.backends.fake.backend import FakeBackend
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.errors import ConfigError
from npu_plugin.inventory.vnpu_plans import (
    ChipPlan,
    Serving,
    VnpuReader,
    serving,
    template_problem,
    with_known_templates,
)

VIR05 = VnpuTemplate("vir05_1c_16g", 5, 16 * 2**30, {"aicpu": Decimal(1), "vpc": Decimal(2)})
CHIP = ChipVnpu(
    physical_id=0,
    mode=ChipMode.CONTAINER,
    totals={"aicore": Decimal(20), "aicpu": Decimal(7), "vpc": Decimal(9), "venc": Decimal(0)},
    templates=(VIR05,),
    id_range=(100, 115),
    dynamic_supported=True,
)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (VIR05, None),
        (replace(VIR05, name="vir05-1c-16g"), "its name is not vir<2 digits>"),
        (replace(VIR05, name="VIR05"), "its name is not vir<2 digits>"),
        (replace(VIR05, name="vir5"), "its name is not vir<2 digits>"),
        (replace(VIR05, aicore=0), "it uses no AI core"),
        (replace(VIR05, aicore=21), "it uses more than the chip has: aicore 21 > 20"),
        (replace(VIR05, uses={"aicpu": Decimal(8), "vpc": Decimal(10)}), "aicpu 8 > 7, vpc 10 > 9"),
        (replace(VIR05, uses={"venc": Decimal(1)}), "venc 1 > 0"),
        (replace(VIR05, uses={"pngd": Decimal("1.5")}), None),  # the chip does not report PNGD: not counted
    ],
)
def test_template_problems(template: VnpuTemplate, problem: str | None) -> None:
    found = template_problem(CHIP, template)
    assert found == problem if problem is None else found is not None and problem in found


def test_checked_keeps_the_good_templates_and_says_why_the_others_go() -> None:
    bad = replace(VIR05, name="vir99_huge", aicore=40)
    chip, problems = with_known_templates(replace(CHIP, templates=(bad, VIR05)))
    assert chip.templates == (VIR05,)
    assert problems == ["npu-0: template 'vir99_huge' skipped: it uses more than the chip has: aicore 40 > 20"]


OURS = Vnpu(0, 100, "vir05_1c_16g")
FOREIGN = Vnpu(0, 102, "vir05_1c_16g")


@pytest.mark.parametrize(
    ("chip", "mode", "static_reason", "expected", "reason"),
    [
        (CHIP, VnpuMode.STATIC, None, Serving.WHOLE, None),
        (replace(CHIP, vnpus=(FOREIGN,)), VnpuMode.STATIC, None, Serving.STATIC, None),
        (CHIP, VnpuMode.DYNAMIC, None, Serving.DYNAMIC, None),
        (replace(CHIP, vnpus=(OURS,)), VnpuMode.DYNAMIC, None, Serving.DYNAMIC, None),
        (
            replace(CHIP, vnpus=(OURS, FOREIGN)),
            VnpuMode.DYNAMIC,
            None,
            Serving.STATIC,
            "not created by npu-plugin (102)",
        ),
        (replace(CHIP, mode=ChipMode.VM), VnpuMode.DYNAMIC, None, Serving.WHOLE, "vm mode"),
        (replace(CHIP, mode=ChipMode.VM, vnpus=(OURS,)), VnpuMode.DYNAMIC, None, Serving.STATIC, "vm mode"),
        (CHIP, VnpuMode.DYNAMIC, "Atlas 300I Duo", Serving.WHOLE, "Atlas 300I Duo"),
        (replace(CHIP, vnpus=(FOREIGN,)), VnpuMode.DYNAMIC, "Ascend 910", Serving.STATIC, "Ascend 910"),
        (replace(CHIP, dynamic_supported=False), VnpuMode.DYNAMIC, None, Serving.WHOLE, "cannot create vNPUs"),
        (replace(CHIP, templates=()), VnpuMode.DYNAMIC, None, Serving.WHOLE, "no usable template"),
    ],
)
def test_serving_policy(
    chip: ChipVnpu, mode: VnpuMode, static_reason: str | None, expected: Serving, reason: str | None
) -> None:
    how, why = serving(chip, mode, static_reason, ours=frozenset({100}))
    assert how is expected
    assert why == reason if reason is None else why is not None and reason in why


class Recording:
    """A VnpuBackend over a profile that records the chips it was asked about."""

    def __init__(self, chips: dict[int, ChipVnpu]) -> None:
        self.chips, self.asked = chips, []

    def chip_vnpu(self, physical_id: int) -> ChipVnpu | None:
        self.asked.append(physical_id)
        return self.chips.get(physical_id)

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        return list(self.chips[physical_id].vnpus)

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        raise AssertionError("the reader never creates")

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        raise AssertionError("the reader never destroys")


def test_with_vnpu_off_the_backend_is_not_asked() -> None:
    inventory = profile_inventory("atlas-800t-a2")
    backend = Recording(dict(inventory.vnpu))
    assert VnpuReader(backend, VnpuMode.OFF).read(inventory.devices) == {}
    assert backend.asked == []


@pytest.mark.parametrize(
    ("profile", "mode", "expected"),
    [
        ("atlas-800t-a2", VnpuMode.DYNAMIC, Serving.DYNAMIC),
        ("atlas-800t-a2", VnpuMode.STATIC, Serving.WHOLE),
        ("atlas-300i-pro", VnpuMode.DYNAMIC, Serving.DYNAMIC),
        ("atlas-300i-duo", VnpuMode.DYNAMIC, Serving.WHOLE),
        ("atlas-800-9000", VnpuMode.DYNAMIC, Serving.WHOLE),
    ],
)
def test_every_chip_of_a_profile_is_planned(profile: str, mode: VnpuMode, expected: Serving) -> None:
    inventory = profile_inventory(profile)
    plans = VnpuReader(Recording(dict(inventory.vnpu)), mode).read(inventory.devices)
    assert sorted(plans) == [d.physical_id for d in inventory.devices]
    assert {plan.serving for plan in plans.values()} == {expected}


@pytest.mark.parametrize(
    ("profile", "product"), [("atlas-300i-duo", "Atlas 300I Duo"), ("atlas-800-9000", "Ascend 910 (910A)")]
)
def test_static_only_products_are_explained_once_naming_the_product(
    profile: str, product: str, caplog: pytest.LogCaptureFixture
) -> None:
    inventory = profile_inventory(profile)
    reader = VnpuReader(Recording(dict(inventory.vnpu)), VnpuMode.DYNAMIC)
    with caplog.at_level(logging.INFO, logger="npu_plugin.inventory.vnpu_plans"):
        reader.read(inventory.devices)
        reader.read(inventory.devices)
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith("--vnpu dynamic: npu-0 (") and product in line and "static vNPUs only" in line


def test_readers_sharing_what_was_said_explain_a_static_only_product_once(caplog: pytest.LogCaptureFixture) -> None:
    inventory = profile_inventory("atlas-300i-duo")
    said: set[str] = set()
    with caplog.at_level(logging.INFO, logger="npu_plugin.inventory.vnpu_plans"):
        for _reader in range(2):
            VnpuReader(Recording(dict(inventory.vnpu)), VnpuMode.DYNAMIC, said=said).read(inventory.devices)
    assert len(caplog.records) == 1
    assert said == {caplog.records[0].getMessage()}


def test_a_bad_template_is_logged_once_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    inventory = profile_inventory("atlas-800t-a2")
    bad = VnpuTemplate("vir_bad", 5, 2**30)
    chips = {p: replace(c, templates=(*c.templates, bad)) for p, c in inventory.vnpu.items()}
    reader = VnpuReader(Recording(chips), VnpuMode.DYNAMIC)
    with caplog.at_level(logging.WARNING, logger="npu_plugin.inventory.vnpu_plans"):
        plans = reader.read(inventory.devices)
        reader.read(inventory.devices)
    assert all(bad not in plan.chip.templates for plan in plans.values())
    assert len([r for r in caplog.records if "npu-0: template 'vir_bad' skipped" in r.getMessage()]) == 1


def test_an_unknown_offered_template_is_a_config_error_naming_the_chip() -> None:
    inventory = profile_inventory("atlas-800t-a2")
    reader = VnpuReader(Recording(dict(inventory.vnpu)), VnpuMode.DYNAMIC, frozenset({"vir05_1c_16g", "vir07"}))
    with pytest.raises(ConfigError) as raised:
        reader.read(inventory.devices)
    assert str(raised.value) == "--vnpu-templates vir07: npu-0 (910B3) offers vir05_1c_16g, vir10_3c_32g"


def test_offered_templates_are_checked_on_dynamic_chips_only() -> None:
    inventory = profile_inventory("atlas-300i-duo")
    reader = VnpuReader(Recording(dict(inventory.vnpu)), VnpuMode.DYNAMIC, frozenset({"vir05_1c_16g"}))
    assert {p.serving for p in reader.read(inventory.devices).values()} == {Serving.WHOLE}


def test_the_fake_backend_plans_its_foreign_vnpus_as_static(tmp_path: Path) -> None:
    inventory = profile_inventory("atlas-800t-a2")
    backend = FakeBackend(profile="atlas-800t-a2", vnpu_state=tmp_path / "hw.json", dev_root=tmp_path / "dev")
    devices = backend.discover()
    backend.create_vnpu(0, "vir05_1c_16g", 102)
    plans = VnpuReader(backend, VnpuMode.DYNAMIC).read(devices)
    assert plans[0] == ChipPlan(
        replace(inventory.vnpu[0], vnpus=(Vnpu(0, 102, "vir05_1c_16g"),)),
        Serving.STATIC,
        "it holds vNPUs not created by npu-plugin (102)",
        foreign=frozenset({102}),
        split_on_demand=True,
    )
    assert plans[1].serving is Serving.DYNAMIC
    assert VnpuReader(backend, VnpuMode.DYNAMIC).read(devices, ours=frozenset({102}))[0].serving is Serving.DYNAMIC


@pytest.mark.parametrize(
    ("profile", "mode", "origins"),
    [
        # 910B splits on demand: ours are dynamic, anyone else's are foreign.
        ("atlas-800t-a2", VnpuMode.DYNAMIC, {100: VnpuOrigin.DYNAMIC, 101: VnpuOrigin.FOREIGN}),
        # Served as they are: an administrator's.
        ("atlas-800t-a2", VnpuMode.STATIC, {100: VnpuOrigin.DYNAMIC, 101: VnpuOrigin.STATIC}),
        # A Duo never splits on demand, so nothing there is foreign.
        ("atlas-300i-duo", VnpuMode.DYNAMIC, {100: VnpuOrigin.DYNAMIC, 101: VnpuOrigin.STATIC}),
        # Nor does a 910A.
        ("atlas-800-9000", VnpuMode.DYNAMIC, {100: VnpuOrigin.DYNAMIC, 101: VnpuOrigin.STATIC}),
    ],
)
def test_each_read_reports_every_vnpu_with_who_made_it(
    profile: str, mode: VnpuMode, origins: dict[int, VnpuOrigin]
) -> None:
    inventory = profile_inventory(profile)
    template = inventory.vnpu[0].templates[0].name
    chips = {
        p: replace(c, vnpus=(Vnpu(0, 100, template), Vnpu(0, 101, template)) if p == 0 else ())
        for p, c in inventory.vnpu.items()
    }
    reported: list[list[tuple[Vnpu, VnpuOrigin]]] = []
    reader = VnpuReader(Recording(chips), mode, on_read=reported.append)
    reader.read(inventory.devices, ours=frozenset({100}))
    assert reported == [[(Vnpu(0, vnpu_id, template), origin) for vnpu_id, origin in origins.items()]]
