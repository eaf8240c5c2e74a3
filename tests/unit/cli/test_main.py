"""The first hour with `npu-plugin`: help that teaches, mistyped and foreign flags, --version,
environment aliases, DRA flags that a mode would ignore, and `inventory` checking names like
`serve`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from npu_plugin import __version__
from npu_plugin.cli.flagparser import FlagParser, env_name
from npu_plugin.cli.flags import build_parser
from npu_plugin.cli.main import config_from_args, main, parse_args, unused_dra_flags

SERVE = ["serve", "--backend", "fake", "--fake-profile", "atlas-800t-a2"]


pytestmark = pytest.mark.usefixtures("restore_logging")


def help_entries(text: str) -> dict[str, str]:
    """Each flag of a --help text with its help, whitespace collapsed."""
    entries: dict[str, str] = {}
    for block in re.split(r"\n(?=  -)", text):
        if block.startswith("  -"):
            options = re.split(r"\s{2,}|\n", block.strip())[0]
            for flag in re.findall(r"(?:^|, )(--?[\w-]+)", options):
                entries[flag] = " ".join(block.split())
    return entries


@pytest.mark.parametrize("command", sorted(build_parser({}).subcommands))
def test_every_flag_says_what_it_does_its_default_and_its_environment_variable(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = build_parser({})
    flags = parser.subcommands[command].flags
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    entries = help_entries(capsys.readouterr().out)
    for flag in flags:
        entry = entries[flag]
        description = re.sub(r"^\S+( \S+)?(, \S+( \S+)?)? ", "", entry).split(" (")[0]
        assert len(description) > 10, (flag, entry)
        assert "default" in entry, (flag, entry)
        # A flag another command declared first reads no variable and names the command its twin
        # belongs to.
        assert f"env: {env_name(flag[2:])}" in entry or f"env: none, {env_name(flag[2:])} is " in entry, (flag, entry)


def test_serve_help_groups_flags_by_mode(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    out = capsys.readouterr().out
    groups = ["what to serve:", "discovery:", "health:", "device plugin (--mode device-plugin|both):"]
    groups += ["DRA (--mode dra|both):", "probes and metrics:", "logging:"]
    positions = [out.index(group) for group in groups]
    assert positions == sorted(positions)
    dra = out[out.index("DRA (--mode dra|both):") : out.index("probes and metrics:")]
    assert "--kubelet-registrar-directory-path" in dra and "--health-interval" not in dra
    assert "env: NPU_PLUGIN_CDI_ROOT or CDI_ROOT" in " ".join(dra.split())


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["serve", "--health-intervl", "3"],
            "npu-plugin serve: error: unrecognized argument --health-intervl (did you mean --health-interval?)",
        ),
        (
            ["serve", "--cdi-rot=/etc/cdi"],
            "npu-plugin serve: error: unrecognized argument --cdi-rot (did you mean --cdi-root?)",
        ),
        (
            ["inventory", "--outptu", "json"],
            "npu-plugin inventory: error: unrecognized argument --outptu (did you mean --output?)",
        ),
        (["serve", "--zzz"], "npu-plugin serve: error: unrecognized argument --zzz"),
    ],
)
def test_a_mistyped_flag_names_the_command_and_the_closest_flag(
    argv: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(argv, {})
    assert exited.value.code == 2
    assert capsys.readouterr().err == expected + "\n"


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"npu-plugin {__version__}\n"


# (alias, flag, Config attribute, value, parsed)
ALIASES = [
    ("CDI_ROOT", "--cdi-root", "cdi_root", "/etc/cdi", Path("/etc/cdi")),
    (
        "KUBELET_REGISTRAR_DIRECTORY_PATH",
        "--kubelet-registrar-directory-path",
        "kubelet_registrar_directory_path",
        "/r",
        Path("/r"),
    ),
    (
        "KUBELET_PLUGINS_DIRECTORY_PATH",
        "--kubelet-plugins-directory-path",
        "kubelet_plugins_directory_path",
        "/p",
        Path("/p"),
    ),
    ("HEALTHCHECK_PORT", "--healthcheck-port", "healthcheck_port", "8081", 8081),
    ("KUBECONFIG", "--kubeconfig", "kubeconfig", "/root/.kube/config", Path("/root/.kube/config")),
    ("NODE_NAME", "--node-name", "node_name", "worker-3", "worker-3"),
]


@pytest.mark.parametrize(("alias", "flag", "attr", "value", "parsed"), ALIASES)
def test_environment_names_of_other_ascend_manifests_are_read(
    alias: str, flag: str, attr: str, value: str, parsed: object
) -> None:
    argv = [*SERVE, "--mode", "dra", *(["--node-name", "n1"] if flag != "--node-name" else [])]
    assert getattr(config_from_args(parse_args(argv, {alias: value})), attr) == parsed


@pytest.mark.parametrize(("alias", "flag", "attr", "value", "parsed"), [a for a in ALIASES if a[0] != "NODE_NAME"])
def test_the_command_line_beats_the_twin_which_beats_the_alias(
    alias: str, flag: str, attr: str, value: str, parsed: object
) -> None:
    twin = env_name(flag[2:])
    assert twin.startswith("NPU_PLUGIN_") and twin != alias
    other, third = ("9001", "9002") if flag == "--healthcheck-port" else ("/twin", "/flag")
    argv = [*SERVE, "--mode", "dra", "--node-name", "n1"]
    by_twin = config_from_args(parse_args(argv, {alias: value, twin: other}))
    assert str(getattr(by_twin, attr)) == other
    by_flag = config_from_args(parse_args([*argv, f"{flag}={third}"], {alias: value, twin: other}))
    assert str(getattr(by_flag, attr)) == third


def test_a_bad_alias_value_names_the_alias(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_args(SERVE, {"HEALTHCHECK_PORT": "http"})
    assert exited.value.code == 2
    assert capsys.readouterr().err.startswith("npu-plugin serve: error: HEALTHCHECK_PORT='http': ")


def test_an_empty_alias_is_unset() -> None:
    assert config_from_args(parse_args(SERVE, {"CDI_ROOT": ""})).cdi_root == Path("/var/run/cdi")


@pytest.mark.parametrize(
    ("extra", "environ", "unused"),
    [
        (
            ["--kubelet-registrar-directory-path=/r", "--device-profile=npu"],
            {},
            ["--kubelet-registrar-directory-path"],  # --device-profile selects nothing in any mode
        ),
        (["--cdi-root=/etc/cdi", "--driver-name=npu.huawei.com"], {}, ["--cdi-root", "--driver-name"]),
        (["--cdi-enabled", "--cdi-root=/etc/cdi", "--driver-name=npu.huawei.com"], {}, []),
        ([], {"CDI_ROOT": "/etc/cdi", "NPU_PLUGIN_STATE_DIR": "/s"}, ["--state-dir", "--cdi-root"]),
        ([], {"KUBECONFIG": "/root/.kube/config"}, []),  # the standard variable is set for many programs
        (["--kubeconfig=/k"], {}, []),  # read for the pod annotations
        (["--kubeconfig=/k", "--pod-annotations=false"], {}, ["--kubeconfig"]),
        (["--mode=dra", "--node-name=n1", "--cdi-root=/etc/cdi"], {}, []),
        (["--mode=both", "--node-name=n1", "--dra-devices=4-7", "--device-profile=npu"], {}, []),
        ([], {}, []),
    ],
)
def test_dra_flags_that_the_mode_never_reads_are_named(
    extra: list[str], environ: dict[str, str], unused: list[str]
) -> None:
    args = parse_args([*SERVE, *extra], environ)
    assert sorted(unused_dra_flags(config_from_args(args), args.given)) == sorted(unused)


@pytest.mark.parametrize(
    ("flag", "value"), [("--node-name", "Not_A_Node"), ("--driver-name", "NPU"), ("--unhealthy-policy", "evict")]
)
def test_inventory_checks_names_like_serve(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inventory", "--backend", "fake", "--fake-profile", "atlas-800t-a2", "-o", "resourceslice"]
    with pytest.raises(SystemExit) as exited:
        main([*argv, flag, value])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"npu-plugin inventory: error: argument {flag}: {value!r} is not ") and err.count("\n") == 1


def test_inventory_resourceslice_names_the_node(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["inventory", "--backend", "fake", "--fake-profile", "atlas-800t-a2", "-o", "resourceslice"]
    assert main([*argv, "--node-name", "worker-1.example"]) == 0
    assert "nodeName: worker-1.example" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "environ", "expected"),
    [
        (
            ["--resource-name", "huawei.com/Ascend910", "--resource-name=huawei.com/Ascend310P"],
            {},
            ["huawei.com/Ascend910", "huawei.com/Ascend310P"],
        ),
        ([], {"NPU_PLUGIN_RESOURCE_NAME": "huawei.com/Ascend310"}, ["huawei.com/Ascend310"]),
        (
            ["--resource-name", "huawei.com/Ascend910"],
            {"NPU_PLUGIN_RESOURCE_NAME": "huawei.com/Ascend310"},
            ["huawei.com/Ascend910"],
        ),
        ([], {}, None),
    ],
)
def test_a_repeatable_flag_collects_its_values_and_the_command_line_replaces_the_environment(
    argv: list[str], environ: dict[str, str], expected: list[str] | None
) -> None:
    parser = FlagParser(prog="npu-plugin", environ=environ)
    parser.add_argument("--resource-name", action="append")
    assert parser.parse_args(argv).resource_name == expected


def test_serve_with_vnpu_off_warns_about_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main([*SERVE, "--dev-root", str(blocker / "dev")]) == 2
    assert "vNPU" not in capsys.readouterr().err


def test_vnpu_dynamic_in_device_plugin_mode_exits_2_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SERVE, "--vnpu", "dynamic"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("npu-plugin serve: error: --vnpu dynamic"), err


def test_serve_checks_the_vnpus_before_serving(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dra = [*SERVE, "--mode", "dra", "--node-name", "n1", "--dev-root", str(tmp_path / "dev")]
    dra += ["--state-dir", str(tmp_path / "state"), "--vnpu", "dynamic"]
    assert main([*dra, "--vnpu-templates", "vir07"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "npu-plugin serve: error: --vnpu-templates vir07: npu-0 (910B3) offers vir05_1c_16g, vir10_3c_32g"
    )
    state = tmp_path / "hw.json"
    state.write_text('{"bootId": 7}')
    assert main([*dra, "--fake-vnpu-state", str(state)]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"npu-plugin serve: error: fake vNPU state {state} is corrupt: bootId: expected a non-empty string, got 7 "
        "(DCMI -8005)"
    )
    # Only the simulated hardware, made by the first start: no checkpoint, no socket.
    assert [p.name for p in (tmp_path / "state").iterdir()] == ["fake-vnpu.json"]


def test_device_profile_is_accepted_for_the_seed_but_not_offered(capsys: pytest.CaptureFixture[str]) -> None:
    """`--device-profile=npu` is in the seed DaemonSet's args and does nothing: accepted, never advertised."""
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "device-profile" not in capsys.readouterr().out
    seed = [*SERVE, "--mode=dra", "--node-name=n1", "--device-profile=npu"]
    assert parse_args(seed, {}).device_profile == "npu"
    assert parse_args(SERVE, {"NPU_PLUGIN_DEVICE_PROFILE": "npu"}).device_profile == "npu"
    with pytest.raises(SystemExit) as exited:
        parse_args([*SERVE, "--device-profile=vnpu"], {})
    assert exited.value.code == 2
    assert "--device-profile" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["serve", "--device-profle=npu"])
    assert "--device-profile" not in capsys.readouterr().err
