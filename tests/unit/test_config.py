"""`serve` flags and their environment twins: parsing, validation, one-line errors."""

from __future__ import annotations

import subprocess
import sys
from operator import attrgetter
from pathlib import Path
from typing import Any

import pytest

from npu_plugin.ascend.container_edits import Injection
from npu_plugin.ascend.vnpu import VnpuMode
from npu_plugin.backends.options import BackendKind, BackendOptions
from npu_plugin.cli.flagparser import env_name
from npu_plugin.cli.main import config_from_args, parse_args
from npu_plugin.config import Config, Mode, UnhealthyPolicy, check_paths
from npu_plugin.errors import ConfigError

BASE = ["serve", "--backend", "fake", "--fake-profile", "atlas-800t-a2"]

# (flag, value given, Config attribute, parsed value)
FLAGS: list[tuple[str, str, str, Any]] = [
    ("--mode", "dra", "mode", Mode.DRA),
    ("--node-name", "node-1.example", "node_name", "node-1.example"),
    ("--npu-smi", "/opt/npu-smi", "backend.npu_smi", "/opt/npu-smi"),
    ("--dcmi-library", "/opt/libdcmi.so", "backend.dcmi_library", "/opt/libdcmi.so"),
    ("--dev-root", "/tmp/dev", "dev_root", Path("/tmp/dev")),
    ("--health-interval", "0.1", "health_interval", 0.1),
    ("--health-failure-threshold", "4", "health_failure_threshold", 4),
    ("--health-recovery-threshold", "5", "health_recovery_threshold", 5),
    ("--resource-name", "example.com/npu", "resource_name", "example.com/npu"),
    ("--device-plugin-path", "/tmp/dp", "device_plugin_path", Path("/tmp/dp")),
    ("--driver-name", "npu.example.com", "driver_name", "npu.example.com"),
    ("--kubelet-registrar-directory-path", "/tmp/reg", "kubelet_registrar_directory_path", Path("/tmp/reg")),
    ("--kubelet-plugins-directory-path", "/tmp/plugins", "kubelet_plugins_directory_path", Path("/tmp/plugins")),
    ("--cdi-root", "/etc/cdi", "cdi_root", Path("/etc/cdi")),
    ("--state-dir", "/tmp/state", "state_dir", Path("/tmp/state")),
    ("--kubeconfig", "/tmp/kubeconfig", "kubeconfig", Path("/tmp/kubeconfig")),
    ("--pod-uid", "0b7c-42", "pod_uid", "0b7c-42"),
    ("--pod-resources-socket", "/tmp/pr.sock", "pod_resources_socket", Path("/tmp/pr.sock")),
    ("--dra-devices", "4-7,9", "dra_devices", "4-7,9"),
    ("--device-injection", "runtime", "device_injection", Injection.RUNTIME),
    ("--unhealthy-policy", "taint", "unhealthy_policy", UnhealthyPolicy.TAINT),
    ("--healthcheck-port", "0", "healthcheck_port", 0),
    ("--metrics-port", "9400", "metrics_port", 9400),
    ("--bind-address", "127.0.0.1", "bind_address", "127.0.0.1"),
    ("--log-level", "DEBUG", "log_level", "debug"),
    ("--log-format", "json", "log_format", "json"),
    ("--vnpu", "static", "vnpu", VnpuMode.STATIC),
    ("--fake-vnpu-state", "/tmp/hw.json", "fake_vnpu_state", Path("/tmp/hw.json")),
    ("--pod-annotations", "false", "pod_annotations", False),
]
SWITCHES = [("--mount-driver", "mount_driver"), ("--cdi-enabled", "cdi_enabled")]
BACKEND_FLAGS: list[tuple[str, str, str, Any]] = [
    ("--backend", "fake", "backend.kind", BackendKind.FAKE),
    ("--fake-inventory", "/tmp/inv.yaml", "backend.fake_inventory", Path("/tmp/inv.yaml")),
    ("--fake-profile", "atlas-300i-duo", "backend.fake_profile", "atlas-300i-duo"),
]
NEEDS = {"--mode": ["--node-name", "n1"]}


def base_without(flag: str) -> list[str]:
    """BASE, less the flag under test so that its environment twin is the one read."""
    if flag == "--backend":
        return ["serve", "--fake-profile", "atlas-800t-a2"]
    if flag == "--fake-profile":
        return ["serve", "--backend", "fake", "--fake-inventory", "/tmp/inv.yaml"]
    return BASE


def config(argv: list[str], environ: dict[str, str] | None = None) -> Any:
    return config_from_args(parse_args(argv, environ or {}))


def test_defaults() -> None:
    c = config(BASE)
    assert (c.mode, c.health_interval, c.health_failure_threshold, c.health_recovery_threshold) == (
        "device-plugin",
        5.0,
        2,
        3,
    )
    assert c.device_plugin_path == Path("/var/lib/kubelet/device-plugins")
    assert c.dra_state_dir == Path("/var/lib/kubelet/plugins/npu.huawei.com")
    assert (c.resource_name, c.driver_name, c.cdi_root) == ("auto", "npu.huawei.com", Path("/var/run/cdi"))
    assert (c.device_injection, c.mount_driver, c.cdi_enabled) == (Injection.NODES, False, False)
    assert (c.healthcheck_port, c.metrics_port, c.bind_address) == (-1, -1, "0.0.0.0")
    assert c.dev_root == Path("/dev")


@pytest.mark.parametrize(("flag", "value", "attr", "parsed"), FLAGS + BACKEND_FLAGS, ids=str)
def test_flag_and_its_environment_twin(flag: str, value: str, attr: str, parsed: Any) -> None:
    base = [*base_without(flag), *NEEDS.get(flag, [])]
    get = attrgetter(attr)
    assert get(config([*base, flag, value])) == parsed
    assert get(config([*base, f"{flag}={value}"])) == parsed
    assert get(config(base, {env_name(flag[2:]): value})) == parsed


def test_a_flag_beats_its_environment_twin() -> None:
    assert config([*BASE, "--health-interval", "2"], {"NPU_PLUGIN_HEALTH_INTERVAL": "7"}).health_interval == 2.0


@pytest.mark.parametrize(("flag", "attr"), SWITCHES)
@pytest.mark.parametrize(("env_value", "expected"), [("true", True), ("1", True), ("off", False), ("", False)])
def test_switches_and_their_environment_twins(flag: str, attr: str, env_value: str, expected: bool) -> None:
    assert getattr(config([*BASE, flag]), attr) is True
    assert getattr(config(BASE, {env_name(flag[2:]): env_value}), attr) is expected


def test_a_config_is_built_by_keywords_with_the_flags_defaults() -> None:
    c = Config(mode=Mode.DRA, node_name="n1")
    assert (c.serves_dra, c.serves_device_plugin, c.backend.kind) == (True, False, BackendKind.AUTO)
    assert c.dra_state_dir == Path("/var/lib/kubelet/plugins/npu.huawei.com")
    assert Config() == config(["serve"]), "the keyword defaults are the flags' defaults"
    with pytest.raises(ConfigError, match="--node-name"):
        Config(mode=Mode.BOTH, dra_devices="4-7")
    with pytest.raises(ConfigError, match="--fake-inventory"):
        BackendOptions(kind=BackendKind.FAKE)
    assert BackendOptions(fake_profile="atlas-800t-a2").uses_fake


@pytest.mark.parametrize(
    ("argv", "environ", "templates"),
    [
        (["--vnpu-templates", "vir05_1c_16g, vir10_3c_32g"], {}, frozenset({"vir05_1c_16g", "vir10_3c_32g"})),
        ([], {"NPU_PLUGIN_VNPU_TEMPLATES": "vir10_3c_16g_nm"}, frozenset({"vir10_3c_16g_nm"})),
        ([], {}, None),
    ],
)
def test_vnpu_templates_is_a_comma_list_of_names(
    argv: list[str], environ: dict[str, str], templates: frozenset[str] | None
) -> None:
    dynamic = [*BASE, "--mode", "dra", "--node-name", "n1", "--vnpu", "dynamic"]
    assert config([*dynamic, *argv], environ).vnpu_templates == templates


@pytest.mark.parametrize(
    ("argv", "state"),
    [
        ([], None),  # --vnpu off: no simulated vNPU hardware at all
        (["--vnpu", "static"], Path("/var/lib/kubelet/plugins/npu.huawei.com/fake-vnpu.json")),
        (["--vnpu", "static", "--state-dir", "/s"], Path("/s/fake-vnpu.json")),
        (["--vnpu", "static", "--fake-vnpu-state", "/hw.json"], Path("/hw.json")),
    ],
)
def test_the_fake_vnpu_state_defaults_to_the_state_dir(argv: list[str], state: Path | None) -> None:
    assert config([*BASE, *argv]).fake_vnpu_state == state


def test_environment_names() -> None:
    assert env_name("mode") == "NPU_PLUGIN_MODE"
    assert env_name("health-failure-threshold") == "NPU_PLUGIN_HEALTH_FAILURE_THRESHOLD"
    assert env_name("node-name") == "NODE_NAME"
    assert env_name("pod-uid") == "POD_UID"


def test_seed_dra_arguments_are_accepted() -> None:
    c = config(
        [
            "serve",
            "--mode",
            "dra",
            "--node-name=worker-1",
            "--device-profile=npu",
            "--driver-name=npu.huawei.com",
            "--kubelet-registrar-directory-path=/var/lib/kubelet/plugins_registry",
            "--kubelet-plugins-directory-path=/var/lib/kubelet/plugins",
            "--cdi-root=/etc/cdi",
            "--healthcheck-port=-1",
        ]
    )
    assert (c.mode, c.node_name, c.cdi_root, c.healthcheck_port) == ("dra", "worker-1", Path("/etc/cdi"), -1)


def test_seed_environment_names_are_read() -> None:
    c = config([*BASE, "--mode", "dra"], {"NODE_NAME": "worker-2", "POD_UID": "abc-123"})
    assert (c.node_name, c.pod_uid) == ("worker-2", "abc-123")


BAD_FLAGS = [
    ("--mode", "bogus"),
    ("--backend", "gpu"),
    ("--fake-profile", "nope"),
    ("--node-name", "Not_A_Name"),
    ("--health-interval", "0"),
    ("--health-interval", "nan"),
    ("--health-interval", "soon"),
    ("--health-failure-threshold", "0"),
    ("--health-recovery-threshold", "1.5"),
    ("--resource-name", "Ascend910"),
    ("--resource-name", "huawei.com/"),
    ("--driver-name", "NPU"),
    ("--device-profile", "vnpu"),
    ("--pod-uid", "../x"),
    ("--device-injection", "both"),
    ("--unhealthy-policy", "evict"),
    ("--healthcheck-port", "70000"),
    ("--metrics-port", "-2"),
    ("--bind-address", "localhost"),
    ("--log-level", "loud"),
    ("--log-format", "xml"),
    ("--npu-smi", " "),
    ("--dra-devices", ""),
    ("--vnpu", "partial"),
    ("--vnpu-templates", "vir05_1c_16g,5c"),
    ("--vnpu-templates", ""),
    ("--pod-annotations", "maybe"),
]


@pytest.mark.parametrize(("flag", "value"), BAD_FLAGS)
def test_bad_flag_values_exit_2_with_one_line_naming_the_flag(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args([*BASE, f"{flag}={value}"], {})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and flag in err, err


@pytest.mark.parametrize(("flag", "value"), BAD_FLAGS)
def test_bad_environment_values_are_rejected_naming_the_variable(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    variable = env_name(flag[2:])
    with pytest.raises(SystemExit) as exited:
        parse_args(base_without(flag), {variable: value})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"npu-plugin serve: error: {variable}={value!r}: "), err


def test_pod_annotations_default_to_on_with_credentials_and_take_an_optional_value() -> None:
    assert config(BASE).pod_annotations is None  # decided at start: on when credentials exist
    named = [*BASE, "--node-name", "n1"]
    assert config([*named, "--pod-annotations"]).pod_annotations is True
    assert config([*named, "--pod-annotations=true"]).pod_annotations is True
    assert config([*named, "--pod-annotations=off"]).pod_annotations is False
    assert config([*named, "--volcano"]).volcano is True
    assert config(named, {"NPU_PLUGIN_VOLCANO": "true"}).volcano is True


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--volcano"], "--volcano needs --node-name"),
        (["--pod-annotations"], "--pod-annotations needs --node-name"),
        (["--node-name", "n1", "--mode", "dra", "--volcano"], "--volcano chooses the devices of Allocate"),
        (["--node-name", "n1", "--volcano", "--pod-annotations=false"], "cannot be combined with --pod-annotations"),
        (["--node-name", "n1", "--volcano", "--share-devices=all"], "cannot be combined with --share-devices"),
    ],
)
def test_volcano_and_pod_annotations_refuse_what_cannot_work(extra: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        config([*BASE, *extra])


def test_bad_switch_environment_value(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(BASE, {"NPU_PLUGIN_CDI_ENABLED": "maybe"})
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cdi-enabled" in err and "NPU_PLUGIN_CDI_ENABLED" in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["serve", "--mode", "dra", "--backend", "fake", "--fake-profile", "atlas-800t-a2"], "--node-name"),
        (["serve", "--backend", "fake"], "--fake-inventory"),
        (["serve", "--backend", "dcmi", "--fake-profile", "atlas-800t-a2"], "--fake-inventory"),
        (["serve", "--backend", "npu-smi", "--fake-vnpu-state", "/tmp/hw.json"], "--fake-vnpu-state"),
        ([*BASE, "--vnpu", "dynamic"], "--vnpu dynamic needs DRA"),
        ([*BASE, "--vnpu", "static", "--vnpu-templates", "vir05_1c_16g"], "--vnpu-templates"),
    ],
)
def test_cross_flag_checks_name_the_flag(argv: list[str], flag: str) -> None:
    with pytest.raises(ConfigError, match=flag):
        config(argv)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "npu_plugin", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )


def test_bogus_mode_from_the_command_line_is_one_line_on_stderr() -> None:
    result = run_cli("serve", "--mode", "bogus")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "--mode" in result.stderr
    assert "device-plugin" in result.stderr, "the line says what is allowed"


def test_a_cross_flag_error_from_the_command_line_is_one_line_and_starts_nothing() -> None:
    result = run_cli("serve", "--mode", "dra", "--backend", "fake", "--fake-profile", "atlas-800t-a2")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--node-name" in result.stderr


@pytest.mark.parametrize(
    ("flag", "mode"),
    [
        ("--device-plugin-path", "device-plugin"),
        ("--dev-root", "device-plugin"),
        ("--kubelet-registrar-directory-path", "dra"),
        ("--kubelet-plugins-directory-path", "dra"),
        ("--cdi-root", "dra"),
        ("--state-dir", "both"),
    ],
)
def test_a_directory_flag_pointing_under_a_file_is_refused(tmp_path: Path, flag: str, mode: str) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = ["serve", "--mode", mode, "--node-name", "n", "--dra-devices", "0", flag, str(blocker / "sub")]
    config = config_from_args(parse_args(argv, environ={}))
    with pytest.raises(ConfigError, match=f"^{flag} {blocker}/sub: {blocker} exists and is not a directory$"):
        check_paths(config)


PATH_FLAGS = [
    ("--device-plugin-path", "device_plugin_path"),
    ("--kubelet-registrar-directory-path", "kubelet_registrar_directory_path"),
    ("--kubelet-plugins-directory-path", "kubelet_plugins_directory_path"),
    ("--cdi-root", "cdi_root"),
    ("--state-dir", "state_dir"),
    ("--pod-resources-socket", "pod_resources_socket"),
    ("--kubeconfig", "kubeconfig"),
    ("--dev-root", "dev_root"),
    ("--fake-vnpu-state", "fake_vnpu_state"),
]


@pytest.mark.parametrize(("flag", "attr"), PATH_FLAGS)
def test_relative_paths_are_taken_from_the_working_directory(flag: str, attr: str) -> None:
    """gRPC reads `unix://dp/x.sock` as a host name: every path is made absolute at start, as the shell meant it."""
    argv = [*BASE, "--mode", "dra", "--node-name", "n1", "--vnpu", "static", flag, "rel/dir"]
    assert getattr(config(argv), attr) == Path.cwd() / "rel" / "dir"
    assert getattr(config([*argv[:-2]], {env_name(flag[2:]): "rel/dir"}), attr) == Path.cwd() / "rel" / "dir"


def test_one_port_for_health_and_metrics_is_refused() -> None:
    with pytest.raises(ConfigError, match=r"^--healthcheck-port 9100 and --metrics-port 9100: .*two ports"):
        config([*BASE, "--healthcheck-port", "9100", "--metrics-port", "9100"])
    for same in ("-1", "0"):  # both off, or each on a free port of its own
        assert config([*BASE, "--healthcheck-port", same, "--metrics-port", same]).metrics_port == int(same)
