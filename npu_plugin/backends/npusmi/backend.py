"""The npu-smi backend: runs the npu-smi executable and turns its tables into Devices and health
samples."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

from npu_plugin.ascend import driver_codes
from npu_plugin.ascend.device import Device, Health, LinkState, has_roce, parse_device_node
from npu_plugin.ascend.vnpu import (
    DESTROY_ALL_ID,
    ChipMode,
    ChipVnpu,
    Vnpu,
    VnpuTemplate,
    default_id_range,
    static_only_reason,
)
from npu_plugin.backends.npusmi.network_parse import parse_hccn_ip, parse_net_health, parse_spod_info
from npu_plugin.backends.npusmi.parse import (
    MappingRow,
    TopologyMatrix,
    build_devices,
    hccs_peers,
    parse_health_codes,
    parse_info,
    parse_mapping,
    parse_topology,
)
from npu_plugin.backends.npusmi.vnpu_parse import (
    CREATE_VNPU,
    DESTROY_VNPU,
    SetOutcome,
    info_vnpu_refusal,
    parse_create_vnpu,
    parse_destroy_vnpu,
    parse_info_vnpu,
    parse_template_info,
    parse_vnpu_mode,
)
from npu_plugin.errors import BackendError, NpuSmiParseError, VnpuError, VnpuNotFoundError

log = logging.getLogger(__name__)

# Where the driver package installs hccn_tool when it is not on PATH (as mind-cluster runs it).
DRIVER_HCCN_TOOL = "/usr/local/Ascend/driver/tools/hccn_tool"

_DESTROY_ALL_REFUSAL = (
    "refusing to destroy vNPU 65535 on npu-{physical_id}: the driver reads that id as every vNPU of the chip"
)

_HINTS = (
    ("dcmi module initialize failed", "run as root (or in the HwHiAiUser group) with /dev/davinci_manager"),
    ("error while loading shared libraries", "put /usr/local/Ascend/driver/lib64 on LD_LIBRARY_PATH"),
    ("permission denied", "run as root (or in the HwHiAiUser group)"),
)


class NpuSmiBackend:
    """Discovery and health through `npu-smi info`, `info -m` and `info -t topo`; vNPUs through
    `info -t template-info`, `info -t info-vnpu`, `info -t vnpu-mode` and `set -t
    create-vnpu|destroy-vnpu`.

    Only `info` is required: without `info -m` or `info -t topo` discovery goes on with what `info`
    alone tells, and says once what was missing.

    Each call runs npu-smi afresh in its own process group, killed whole when it overruns `timeout`.
    `dev_root`, when given, is listed for davinciN nodes so that hosts whose npu-smi prints no
    physical id get them from the nodes present (see npusmi_parse).

    Device IPs come from `hccn_tool -i <physical id> -ip -g` (`hccn_tool`: on PATH, else the
    driver's tools directory), super-pod identity from `npu-smi info -t spod-info` on Atlas A3.
    """

    name = "npu-smi"
    host_sysfs = True

    def __init__(
        self, executable: str, timeout: float = 10.0, *, dev_root: Path | None = None, hccn_tool: str | None = None
    ) -> None:
        self.executable = executable
        self.hccn_tool = hccn_tool or shutil.which("hccn_tool") or DRIVER_HCCN_TOOL
        self.timeout = timeout
        self.dev_root = dev_root
        self.topology: TopologyMatrix | None = None
        self._physical_ids: dict[tuple[int, int], int] = {}
        self._devices: dict[int, Device] = {}
        self._templates: dict[int, tuple[VnpuTemplate, ...]] = {}
        self._by_logic_id: dict[int, int] = {}
        self._sampling_fails = False
        self._reported_missing: set[tuple[str, str]] = set()

    def discover(self) -> list[Device]:
        """Every die npu-smi lists; raises BackendError (NpuSmiParseError for unreadable output)."""
        info = parse_info(self._run("info"))
        mapping = self._mapping()
        devices = [self._networked(d) for d in build_devices(info, mapping, self._device_nodes())]
        self.topology = self._topology()
        self._physical_ids = {(d.card_id, d.chip_id): d.physical_id for d in devices}
        self._by_logic_id = {d.logic_id: d.physical_id for d in devices}
        self._devices = {d.physical_id: d for d in devices}
        return devices

    def _networked(self, device: Device) -> Device:
        """The device with its RoCE address (hccn_tool) and, on an A3, its super-pod identity
        (npu-smi); what cannot be read stays None, the query's failure said once per backend."""
        if not has_roce(device.device_type):
            return device
        try:
            ip = parse_hccn_ip(self._run_tool(self.hccn_tool, "-i", str(device.physical_id), "-ip", "-g"))
        except BackendError as error:
            self._missing("-ip -g", "device IPs are unknown", error, logging.WARNING, tool="hccn_tool")
            ip = None
        device = replace(device, device_ip=ip)
        if device.device_type != "Ascend910C":
            return device
        where = ("-i", str(device.card_id), "-c", str(device.chip_id))
        try:
            spod = parse_spod_info(self._run("info", "-t", "spod-info", *where))
        except BackendError as error:
            self._missing("info -t spod-info", "super-pod ids are unknown", error, logging.WARNING)
            return device
        return replace(device, super_pod_id=spod[0], server_index=spod[1], rack_id=spod[2])

    def hccs_peers(self) -> dict[int, frozenset[int]]:
        """HCCS peers by physical id; the topology matrix numbers dies like logic ids."""
        if self.topology is None:
            return {}
        by_logic = self._by_logic_id
        return {
            by_logic[label]: frozenset(by_logic[p] for p in peers if p in by_logic)
            for label, peers in hccs_peers(self.topology).items()
            if label in by_logic
        }

    def sample(self) -> dict[int, Health]:
        """Health per physical id from a fresh `npu-smi info`; every device is Unknown when that
        fails."""
        known = self._physical_ids
        try:
            rows = parse_info(self._run("info"))
        except BackendError as error:
            if not self._sampling_fails:  # once per outage, not on every poll
                log.warning(
                    "npu-smi health sample failed, every device reads Unknown: %s", error, extra={"error": str(error)}
                )
            self._sampling_fails = True
            return dict.fromkeys(known.values(), Health.UNKNOWN)
        if self._sampling_fails:
            log.info("npu-smi health samples work again")
            self._sampling_fails = False
        health = {(row.card_id, row.chip_id): row.health for row in rows}
        return {physical: health.get(chip, Health.UNKNOWN) for chip, physical in known.items()}

    def fault_codes(self, physical_ids: Iterable[int]) -> dict[int, tuple[int, ...]]:
        """`npu-smi info -t health -i <card> -c <chip>` for each of these devices (one run each: only
        devices whose level is not OK are asked); a device whose run fails is left out. Never
        raises."""
        wanted = set(physical_ids)
        found: dict[int, tuple[int, ...]] = {}
        for (card, chip), physical in self._physical_ids.items():
            if physical not in wanted:
                continue
            try:
                codes = parse_health_codes(self._run("info", "-t", "health", "-i", str(card), "-c", str(chip)))
            except BackendError as error:
                log.debug("npu-smi fault codes of npu-%d unread: %s", physical, error, extra={"error": str(error)})
                continue
            if codes:
                found[physical] = codes
        return found

    def link_states(self, physical_ids: Iterable[int]) -> dict[int, LinkState]:
        """`hccn_tool -i <physical id> -net_health -g` for each of these devices (one run each); a
        device whose run fails or says nothing usable is left out. Never raises."""
        found: dict[int, LinkState] = {}
        for physical_id in sorted(set(physical_ids) & self._devices.keys()):
            try:
                text = self._run_tool(self.hccn_tool, "-i", str(physical_id), "-net_health", "-g")
            except BackendError as error:
                self._missing(
                    "hccn_tool -net_health -g", "the links it fails for are not watched", error, logging.WARNING
                )
                continue
            if (state := parse_net_health(text)) is not LinkState.UNKNOWN:
                found[physical_id] = state
        return found

    def close(self) -> None:
        """Nothing to release: no npu-smi process outlives the call that started it."""

    # ---- vNPUs

    def chip_vnpu(self, physical_id: int) -> ChipVnpu | None:
        """Templates, totals and vNPUs of a chip; None when npu-smi says the chip cannot be
        split."""
        device = self._discovered(physical_id)
        where = ("-i", str(device.card_id), "-c", str(device.chip_id))
        try:
            answer = self._run("info", "-t", "info-vnpu", *where)
        except BackendError as error:
            self._missing(
                f"info -t info-vnpu {' '.join(where)}", f"npu-{physical_id} is not split", error, logging.INFO
            )
            return None
        refusal = info_vnpu_refusal(answer)
        if refusal is ChipMode.UNSUPPORTED:
            return None
        table = None if refusal else parse_info_vnpu(answer)
        dies = sum(other.card_id == device.card_id for other in self._devices.values())
        return ChipVnpu(
            physical_id=physical_id,
            mode=refusal or self._vnpu_mode(),
            totals={name: amount for name, amount in table.total.items() if name != "memory"} if table else {},
            templates=self._card_templates(device.card_id),
            id_range=default_id_range(physical_id, device.device_type),
            dynamic_supported=static_only_reason(device.device_type, dies) is None,
            vnpus=tuple(Vnpu(physical_id, row.vnpu_id, row.template) for row in table.vnpus) if table else (),
        )

    def templates(self, card_id: int) -> tuple[VnpuTemplate, ...]:
        """The templates `info -t template-info -i <card>` lists; BackendError when npu-smi cannot
        tell.

        Read once per card: they are the driver's tables, which do not change while it runs."""
        if (known := self._templates.get(card_id)) is None:
            known = parse_template_info(self._run("info", "-t", "template-info", "-i", str(card_id)))
            self._templates[card_id] = known
        return known

    def _card_templates(self, card_id: int) -> tuple[VnpuTemplate, ...]:
        """The card's templates; none when template-info fails (said once per card), malformed
        output raising."""
        try:
            return self.templates(card_id)
        except NpuSmiParseError:
            raise
        except BackendError as error:
            consequence = f"no vNPU templates are known for card {card_id}"
            self._missing(f"info -t template-info -i {card_id}", consequence, error, logging.WARNING)
            return ()

    def list_vnpus(self, physical_id: int) -> list[Vnpu]:
        """The vNPUs `info -t info-vnpu` lists for the chip (none in VM mode, where it lists
        nothing)."""
        device = self._discovered(physical_id)
        answer = self._run("info", "-t", "info-vnpu", "-i", str(device.card_id), "-c", str(device.chip_id))
        if info_vnpu_refusal(answer):
            return []
        return [Vnpu(physical_id, row.vnpu_id, row.template) for row in parse_info_vnpu(answer).vnpus]

    def create_vnpu(self, physical_id: int, template: str, vnpu_id: int) -> int:
        """`set -t create-vnpu -i <card> -c <chip> -f <template> -v <id>`; VnpuError with the
        refusal's DCMI code. npu-smi does not say which id it gave, so for the any-id (0xffffffff)
        the id is the one new in the list."""
        device = self._discovered(physical_id)
        where = ("-i", str(device.card_id), "-c", str(device.chip_id))
        before = {v.vnpu_id for v in self.list_vnpus(physical_id)} if vnpu_id == driver_codes.ANY_VNPU_ID else set()
        command, outcome = self._set(parse_create_vnpu, CREATE_VNPU, *where, "-f", template, "-v", str(vnpu_id))
        if not outcome.ok:
            raise VnpuError(outcome.code, f"`{command}` failed: {outcome.message}")
        if vnpu_id != driver_codes.ANY_VNPU_ID:
            return vnpu_id
        made = [v.vnpu_id for v in self.list_vnpus(physical_id) if v.vnpu_id not in before]
        if len(made) != 1:
            found = f"{len(made)} new vNPUs" if made else "no new vNPU"
            raise VnpuError(driver_codes.INNER_ERR, f"`{command}` succeeded but info-vnpu lists {found}")
        return made[0]

    def destroy_vnpu(self, physical_id: int, vnpu_id: int) -> None:
        """`set -t destroy-vnpu -i <card> -c <chip> -v <id>`; never with the driver's destroy-all
        id."""
        if vnpu_id == DESTROY_ALL_ID:
            raise VnpuError(driver_codes.INVALID_PARAMETER, _DESTROY_ALL_REFUSAL.format(physical_id=physical_id))
        device = self._discovered(physical_id)
        where = ("-i", str(device.card_id), "-c", str(device.chip_id), "-v", str(vnpu_id))

        def parse(text: str, status: int) -> SetOutcome:
            return parse_destroy_vnpu(text, status, vnpu_id)

        command, outcome = self._set(parse, DESTROY_VNPU, *where)
        if outcome.code == driver_codes.DEVICE_NOT_EXIST:
            raise VnpuNotFoundError(outcome.code, f"`{command}`: npu-{physical_id} has no vNPU {vnpu_id}")
        if not outcome.ok:
            raise VnpuError(outcome.code, f"`{command}` failed: {outcome.message}")

    def _set(self, parse: Callable[[str, int], SetOutcome], what: str, *args: str) -> tuple[str, SetOutcome]:
        """Run a `set` command whatever its exit status (npu-smi refuses some with status 0) and
        read its answer."""
        arguments = (*what.split(), *args)
        command = " ".join((self.executable, *arguments))
        try:
            status, stdout, stderr = self._execute(*arguments)
        except BackendError as error:  # not started, or killed at the timeout
            raise VnpuError(driver_codes.INNER_ERR, str(error)) from None
        return command, parse(stdout + stderr, status)

    def _vnpu_mode(self) -> ChipMode:
        """The host's vNPU mode; npu-smi in a privileged container on 910B cannot tell it, and there
        creates vNPUs without asking, so container mode is assumed then."""
        try:
            return parse_vnpu_mode(self._run("info", "-t", "vnpu-mode"))
        except NpuSmiParseError:
            raise
        except BackendError as error:
            self._missing("info -t vnpu-mode", "container mode is assumed", error, logging.INFO)
            return ChipMode.CONTAINER

    def _discovered(self, physical_id: int) -> Device:
        if (device := self._devices.get(physical_id)) is None:
            raise BackendError(f"npu-smi backend: no NPU with physical id {physical_id} was discovered")
        return device

    def _mapping(self) -> list[MappingRow] | None:
        # Some npu-smi versions and products answer "This command is not supported on this device".
        try:
            return parse_mapping(self._run("info", "-m"))
        except BackendError as error:
            self._missing("info -m", "logic ids follow the order of `npu-smi info`", error, logging.WARNING)
            return None

    def _topology(self) -> TopologyMatrix | None:
        # 310/310P hosts answer "does not support querying topo"; devices are usable without it.
        try:
            return parse_topology(self._run("info", "-t", "topo"))
        except BackendError as error:
            self._missing(
                "info -t topo", "no HCCS topology; groups follow the chip family's layout", error, logging.INFO
            )
            return None

    def _missing(self, query: str, consequence: str, error: BackendError, level: int, tool: str = "npu-smi") -> None:
        """Log an auxiliary query's failure once per backend, not on every discovery."""
        if (tool, query) not in self._reported_missing:
            self._reported_missing.add((tool, query))
            message = "`%s %s` gave nothing usable, so %s: %s"
            log.log(level, message, tool, query, consequence, error, extra={"error": str(error)})

    def _device_nodes(self) -> list[int] | None:
        if self.dev_root is None:
            return None
        try:
            names = [entry.name for entry in self.dev_root.iterdir()]
        except OSError as error:
            log.warning(
                "cannot list %s for davinci nodes: %s", self.dev_root, error.strerror, extra={"error": error.strerror}
            )
            return None
        return [found for name in names if (found := parse_device_node(name)) is not None] or None

    def _run(self, *args: str) -> str:
        return self._run_tool(self.executable, *args)

    def _run_tool(self, executable: str, *args: str) -> str:
        status, stdout, stderr = self._execute_tool(executable, *args)
        if status != 0:
            raise BackendError(_exit_failure(" ".join((executable, *args)), status, stdout, stderr))
        return stdout

    def _execute(self, *args: str) -> tuple[int, str, str]:
        return self._execute_tool(self.executable, *args)

    def _execute_tool(self, executable: str, *args: str) -> tuple[int, str, str]:
        """Exit status, stdout and stderr of one run of npu-smi (or hccn_tool); BackendError when it
        cannot start or overruns."""
        command = " ".join((executable, *args))
        try:
            process = subprocess.Popen(
                [executable, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            if executable != self.executable:
                raise BackendError(f"cannot run hccn_tool {executable!r}: {error.strerror or error}") from None
            raise BackendError(_launch_failure(executable, error)) from None
        stdout, stderr = _communicate(process, command, self.timeout)
        return process.returncode, stdout.decode("utf-8", "replace"), stderr.decode("utf-8", "replace")


def _communicate(process: subprocess.Popen[bytes], command: str, timeout: float) -> tuple[bytes, bytes]:
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # The whole group: an npu-smi wrapper script's children would otherwise keep running.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise BackendError(
            f"`{command}` did not finish within {timeout:g} s and was killed; the NPU driver may be hung "
            "(check `dmesg` and the device health on the host)"
        ) from None


def _launch_failure(executable: str, error: OSError) -> str:
    if isinstance(error, FileNotFoundError):
        return (
            f"npu-smi executable {executable!r} not found; install the Ascend driver package "
            "or pass --npu-smi PATH (NPU_PLUGIN_NPU_SMI)"
        )
    if isinstance(error, PermissionError):
        return f"npu-smi executable {executable!r} is not executable: {error.strerror}"
    return f"cannot run npu-smi executable {executable!r}: {error.strerror or error}"


def _exit_failure(command: str, code: int, stdout: str, stderr: str) -> str:
    said = " / ".join(line.strip() for line in (stderr + "\n" + stdout).splitlines() if line.strip())
    status = f"killed by signal {-code}" if code < 0 else f"exited with status {code}"
    message = f"`{command}` {status}: {said[:300] or 'no output'}"
    hint = next((hint for needle, hint in _HINTS if needle in said.lower()), None)
    return f"{message} (hint: {hint})" if hint else message
