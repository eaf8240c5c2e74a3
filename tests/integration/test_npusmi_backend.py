"""NpuSmiBackend against fake `npu-smi` shell scripts: real processes, real exit codes, a real
hang."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from npu_plugin.ascend.device import Health, LinkState
from npu_plugin.backends.npusmi.backend import NpuSmiBackend
from npu_plugin.errors import BackendError, NpuSmiParseError
from tests.support.fake_hardware import NO_HCCN_TOOL, fake_hccn_tool, fake_npu_smi, script
from tests.support.fake_hardware import NPU_SMI_FIXTURES as FIXTURES


@pytest.fixture
def b3(tmp_path: Path) -> Path:
    """An 8 x 910B3 host."""
    return fake_npu_smi(tmp_path / "b3", "910b3-x8.info.txt", "910b3-x8.mapping.txt", "910b3-x8.topo.txt")


def test_discover_reads_all_three_commands(b3: Path) -> None:
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    devices = backend.discover()
    assert [d.physical_id for d in devices] == list(range(8))
    assert {(d.device_type, d.chip_name, d.memory) for d in devices} == {("Ascend910B", "910B3", 64 * 1024**3)}
    assert devices[0].pci_bus_id == "0000:c1:00.0"
    assert backend.topology is not None
    assert backend.topology.cpu_affinity[0] == "144-167"


def test_discover_of_a_910c_host_takes_physical_ids_from_phy_id(tmp_path: Path) -> None:
    npu_smi = fake_npu_smi(tmp_path, "910c-container.info.txt", "910c-container.mapping.txt", "310p3.topo.txt")
    devices = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL).discover()
    assert [(d.physical_id, d.logic_id, d.card_id, d.chip_id) for d in devices] == [(4, 0, 2, 0), (5, 1, 2, 1)]
    assert {d.device_type for d in devices} == {"Ascend910C"}


def test_a_host_without_topology_still_discovers(tmp_path: Path) -> None:
    npu_smi = fake_npu_smi(tmp_path, "310p3-duo-x2.info.txt", "310p3-duo-x2.mapping.txt", "310p3.topo.txt")
    (tmp_path / "topo.status").write_text("1")
    backend = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL)
    assert [d.physical_id for d in backend.discover()] == [0, 1, 2, 3]
    assert backend.topology is None


NOT_SUPPORTED = "This command is not supported on this device\n"


def unsupported(npu_smi: Path, name: str) -> None:
    """Make the fake answer one query the way npu-smi does on products without it: a message, exit
    1."""
    (npu_smi.parent / f"{name}.txt").write_text(NOT_SUPPORTED)
    (npu_smi.parent / f"{name}.status").write_text("1")


@pytest.mark.parametrize(
    ("info", "mapping", "ids"),
    [
        ("910b3-x8.info.txt", "910b3-x8.mapping.txt", [(n, n, n, 0) for n in range(8)]),
        ("910c-x16.info.txt", "910c-x16.mapping.txt", [(n, n, n // 2, n % 2) for n in range(16)]),
        ("910c-container.info.txt", "910c-container.mapping.txt", [(4, 0, 2, 0), (5, 1, 2, 1)]),
        ("310p3-duo-x2.info.txt", "310p3-duo-x2.mapping.txt", [(0, 0, 1, 0), (1, 1, 1, 1), (2, 2, 3, 0), (3, 3, 3, 1)]),
    ],
)
def test_discovery_without_info_m_or_topology_uses_info_alone(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, info: str, mapping: str, ids: list[tuple[int, int, int, int]]
) -> None:
    with_mapping = NpuSmiBackend(str(fake_npu_smi(tmp_path / "full", info, mapping)), hccn_tool=NO_HCCN_TOOL).discover()
    npu_smi = fake_npu_smi(tmp_path / "bare", info, mapping, "910b3-x8.topo.txt")
    unsupported(npu_smi, "mapping")
    unsupported(npu_smi, "topo")
    backend = NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL)

    with caplog.at_level(logging.INFO, logger="npu_plugin.backends.npusmi.backend"):
        first, second = backend.discover(), backend.discover()

    assert first == second == with_mapping
    assert [(d.physical_id, d.logic_id, d.card_id, d.chip_id) for d in first] == ids
    assert backend.topology is None
    assert backend.hccs_peers() == {}
    said = [r.getMessage() for r in caplog.records]
    assert len([m for m in said if "`npu-smi info -m` gave nothing usable" in m]) == 1
    assert len([m for m in said if "`npu-smi info -t topo` gave nothing usable" in m]) == 1
    assert any("logic ids follow the order of `npu-smi info`" in m and NOT_SUPPORTED.strip() in m for m in said)


def test_topology_without_info_m_is_read_by_logic_ids_in_info_order(b3: Path) -> None:
    unsupported(b3, "mapping")
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    backend.discover()
    assert backend.hccs_peers() == {n: frozenset(set(range(8)) - {n}) for n in range(8)}


def test_unreadable_info_m_output_is_no_reason_to_fail(b3: Path) -> None:
    (b3.parent / "mapping.txt").write_text("Usage: npu-smi info [-m]\n")
    assert [d.physical_id for d in NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL).discover()] == list(range(8))


def test_info_itself_failing_still_fails_discovery(b3: Path) -> None:
    unsupported(b3, "info")
    with pytest.raises(BackendError, match="This command is not supported on this device"):
        NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL).discover()


def test_dev_root_nodes_give_physical_ids_when_npu_smi_prints_none(b3: Path, tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    for name in ("davinci_manager", "devmm_svm", *(f"davinci{n}" for n in range(3, 11))):
        (dev / name).touch()
    devices = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL, dev_root=dev).discover()
    assert [(d.logic_id, d.physical_id) for d in devices] == [(n, n + 3) for n in range(8)]


def test_sample_reads_health_afresh(b3: Path) -> None:
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    backend.discover()
    assert set(backend.sample().values()) == {Health.OK}
    (b3.parent / "info.txt").write_text((FIXTURES / "910b3-x8-faults.info.txt").read_text())
    health = backend.sample()
    assert [health[n] for n in range(5)] == [Health.OK, Health.WARNING, Health.ALARM, Health.CRITICAL, Health.UNKNOWN]


def test_a_device_missing_from_a_sample_reads_unknown(b3: Path) -> None:
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    backend.discover()
    lines = (b3.parent / "info.txt").read_text().splitlines()
    (b3.parent / "info.txt").write_text("\n".join(lines[:-3]) + "\n")  # card 7's rows gone
    health = backend.sample()
    assert health[7] is Health.UNKNOWN
    assert {health[n] for n in range(7)} == {Health.OK}


@pytest.mark.parametrize("breakage", ["exit status", "garbage", "executable gone"])
def test_sample_never_raises_and_reads_unknown_when_npu_smi_fails(b3: Path, breakage: str) -> None:
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    backend.discover()
    if breakage == "exit status":
        (b3.parent / "info.status").write_text("1")
    elif breakage == "garbage":
        (b3.parent / "info.txt").write_text("dcmi module initialize failed. ret is -8005\n")
    else:
        b3.unlink()
    assert backend.sample() == dict.fromkeys(range(8), Health.UNKNOWN)


def test_a_failing_sample_is_logged_once_per_outage(b3: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="npu_plugin.backends.npusmi.backend")
    backend = NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL)
    backend.discover()
    (b3.parent / "info.status").write_text("1")
    backend.sample()
    backend.sample()
    (b3.parent / "info.status").unlink()
    assert set(backend.sample().values()) == {Health.OK}
    messages = [r.getMessage() for r in caplog.records if r.name == "npu_plugin.backends.npusmi.backend"]
    assert len([m for m in messages if "health sample failed" in m]) == 1
    assert messages[-1] == "npu-smi health samples work again"


def test_sample_before_discover_knows_no_device(b3: Path) -> None:
    assert NpuSmiBackend(str(b3), hccn_tool=NO_HCCN_TOOL).sample() == {}


def test_a_failing_exit_code_is_reported_with_its_output_and_a_hint(tmp_path: Path) -> None:
    npu_smi = script(tmp_path / "npu-smi", "#!/bin/sh\necho 'dcmi module initialize failed. ret is -8005'\nexit 255\n")
    with pytest.raises(BackendError) as raised:
        NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL).discover()
    message = str(raised.value)
    assert f"`{npu_smi} info` exited with status 255: dcmi module initialize failed. ret is -8005" in message
    assert "hint: run as root" in message


def test_unreadable_output_is_a_parse_error(tmp_path: Path) -> None:
    npu_smi = script(tmp_path / "npu-smi", "#!/bin/sh\necho 'Usage: npu-smi info ...'\n")
    with pytest.raises(NpuSmiParseError, match="npu-smi info: no device table header"):
        NpuSmiBackend(str(npu_smi), hccn_tool=NO_HCCN_TOOL).discover()


def test_a_missing_executable_says_how_to_point_at_one(tmp_path: Path) -> None:
    backend = NpuSmiBackend(str(tmp_path / "no-such-npu-smi"), hccn_tool=NO_HCCN_TOOL)
    with pytest.raises(BackendError, match=r"not found; install the Ascend driver package or pass --npu-smi PATH"):
        backend.discover()
    assert backend.sample() == {}
    backend.close()


def test_a_file_that_is_not_executable_is_named(tmp_path: Path) -> None:
    (tmp_path / "npu-smi").write_text("#!/bin/sh\n")
    with pytest.raises(BackendError, match="is not executable"):
        NpuSmiBackend(str(tmp_path / "npu-smi"), hccn_tool=NO_HCCN_TOOL).discover()


def test_a_hang_times_out_and_kills_the_whole_process_group(tmp_path: Path) -> None:
    hang = '#!/bin/sh\nsleep 300 &\necho $! > "$(dirname "$0")/child.pid"\nwait\n'
    backend = NpuSmiBackend(str(script(tmp_path / "npu-smi", hang)), hccn_tool=NO_HCCN_TOOL, timeout=1.0)
    with pytest.raises(BackendError, match=r"info` did not finish within 1 s and was killed"):
        backend.discover()
    assert _gone(int((tmp_path / "child.pid").read_text()))
    assert backend.sample() == {}


def _gone(pid: int) -> bool:
    """The process no longer runs (absent, or a zombie waiting for a reaper we do not control)."""
    for _ in range(100):
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return True
        if state in ("Z", "X"):
            return True
        time.sleep(0.05)
    os.kill(pid, 9)
    return False


def test_device_ips_come_from_hccn_tool(b3: Path, tmp_path: Path) -> None:
    hccn = fake_hccn_tool(tmp_path / "hccn", {i: f"192.168.100.{101 + i}" for i in range(7)} | {7: None})

    devices = NpuSmiBackend(str(b3), hccn_tool=str(hccn)).discover()

    assert [d.device_ip for d in devices] == [f"192.168.100.{101 + i}" for i in range(7)] + [None]
    assert {d.super_pod_id for d in devices} == {None}  # an A2 is no super pod: npu-smi is not asked
    assert (hccn.parent / "runs.log").read_text().splitlines() == [f"-i {i} -ip -g" for i in range(8)]


def test_a3_dies_get_their_super_pod_from_npu_smi(tmp_path: Path) -> None:
    npu_smi = fake_npu_smi(tmp_path, "910c-container.info.txt", "910c-container.mapping.txt", "310p3.topo.txt")
    (tmp_path / "spod-info-2-0.txt").write_text(
        "\tSDID                           : 8392704\n\tSuper Pod Size                 : 48\n"
        "\tSuper Pod ID                   : 7\n\tServer Index                   : 3\n"
    )
    hccn = fake_hccn_tool(tmp_path / "hccn", {4: "fd00::4", 5: "10.0.0.5"})

    devices = NpuSmiBackend(str(npu_smi), hccn_tool=str(hccn)).discover()

    assert [(d.device_ip, d.super_pod_id, d.server_index, d.rack_id) for d in devices] == [
        ("fd00::4", 7, 3, None),
        ("10.0.0.5", None, None, None),  # its spod-info query fails: left unknown
    ]


def test_no_roce_no_hccn_tool_run(tmp_path: Path) -> None:
    npu_smi = fake_npu_smi(tmp_path, "310p3-duo-x2.info.txt", "310p3-duo-x2.mapping.txt", "310p3.topo.txt")
    hccn = fake_hccn_tool(tmp_path / "hccn")

    assert {d.device_ip for d in NpuSmiBackend(str(npu_smi), hccn_tool=str(hccn)).discover()} == {None}
    assert not (hccn.parent / "runs.log").exists()


def test_a_missing_hccn_tool_leaves_ips_unknown_said_once(
    b3: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    backend = NpuSmiBackend(str(b3), hccn_tool=str(tmp_path / "absent" / "hccn_tool"))

    assert {d.device_ip for d in backend.discover()} == {None}
    backend.discover()
    said = [r.getMessage() for r in caplog.records if "hccn_tool" in r.getMessage()]
    assert len(said) == 1 and "device IPs are unknown" in said[0], said


def test_link_states_come_from_hccn_tool_net_health(b3: Path, tmp_path: Path) -> None:
    hccn = fake_hccn_tool(tmp_path / "hccn")
    answers = {0: "Success", 1: "Fault", 2: "Init", 3: "Unknown!"}
    for physical_id, word in answers.items():
        (hccn.parent / f"net_health-{physical_id}.txt").write_text(f"net health status: {word}\n")
    backend = NpuSmiBackend(str(b3), hccn_tool=str(hccn))
    backend.discover()
    (hccn.parent / "runs.log").unlink()

    states = backend.link_states([0, 1, 2, 3, 4, 99])

    # 3's answer is no state, 4's query fails (no file), 99 is no device of this host: all left out.
    assert states == {0: LinkState.UP, 1: LinkState.DOWN, 2: LinkState.UP}
    assert (hccn.parent / "runs.log").read_text().splitlines() == [f"-i {i} -net_health -g" for i in range(5)]
