"""The npu-smi backend: runs the npu-smi executable and turns its tables into Devices and health samples."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import subprocess
from pathlib import Path

from npu_plugin.backends.npusmi_parse import (
    MappingRow,
    TopologyMatrix,
    build_devices,
    hccs_peers,
    parse_info,
    parse_mapping,
    parse_topology,
)
from npu_plugin.device import Device, Health
from npu_plugin.errors import BackendError

log = logging.getLogger(__name__)

_DEVICE_NODE = re.compile(r"davinci([0-9]{1,6})")
_HINTS = (
    ("dcmi module initialize failed", "run as root (or in the HwHiAiUser group) with /dev/davinci_manager"),
    ("error while loading shared libraries", "put /usr/local/Ascend/driver/lib64 on LD_LIBRARY_PATH"),
    ("permission denied", "run as root (or in the HwHiAiUser group)"),
)


class NpuSmiBackend:
    """Discovery and health through `npu-smi info`, `info -m` and `info -t topo`.

    Only `info` is required: without `info -m` or `info -t topo` discovery goes on with what `info`
    alone tells, and says once what was missing.

    Each call runs npu-smi afresh in its own process group, killed whole when it overruns `timeout`.
    `dev_root`, when given, is listed for davinciN nodes so that hosts whose npu-smi prints no
    physical id get them from the nodes present (see npusmi_parse).
    """

    name = "npu-smi"
    host_sysfs = True

    def __init__(self, executable: str, timeout: float = 10.0, *, dev_root: Path | None = None) -> None:
        self.executable = executable
        self.timeout = timeout
        self.dev_root = dev_root
        self.topology: TopologyMatrix | None = None
        self._physical_ids: dict[tuple[int, int], int] = {}
        self._by_logic_id: dict[int, int] = {}
        self._sampling_fails = False
        self._reported_missing: set[str] = set()

    def discover(self) -> list[Device]:
        """Every die npu-smi lists; raises BackendError (NpuSmiParseError for unreadable output)."""
        info = parse_info(self._run("info"))
        mapping = self._mapping()
        devices = build_devices(info, mapping, self._device_nodes())
        self.topology = self._topology()
        self._physical_ids = {(d.card_id, d.chip_id): d.physical_id for d in devices}
        self._by_logic_id = {d.logic_id: d.physical_id for d in devices}
        return devices

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
        """Health per physical id from a fresh `npu-smi info`; every device is Unknown when that fails."""
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

    def close(self) -> None:
        """Nothing to release: no npu-smi process outlives the call that started it."""

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

    def _missing(self, query: str, consequence: str, error: BackendError, level: int) -> None:
        """Log an auxiliary query's failure once per backend, not on every discovery."""
        if query not in self._reported_missing:
            self._reported_missing.add(query)
            message = "`npu-smi %s` gave nothing usable, so %s: %s"
            log.log(level, message, query, consequence, error, extra={"error": str(error)})

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
        return [int(found.group(1)) for name in names if (found := _DEVICE_NODE.fullmatch(name))] or None

    def _run(self, *args: str) -> str:
        command = " ".join((self.executable, *args))
        try:
            process = subprocess.Popen(
                [self.executable, *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as error:
            raise BackendError(_launch_failure(self.executable, error)) from None
        stdout, stderr = _communicate(process, command, self.timeout)
        output = stdout.decode("utf-8", "replace")
        if process.returncode != 0:
            raise BackendError(_exit_failure(command, process.returncode, output, stderr.decode("utf-8", "replace")))
        return output


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
