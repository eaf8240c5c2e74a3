"""`npu-plugin migrate` as a user runs it: flags, files, stdin/stdout, --check, exit codes, atomic
output."""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from npu_plugin.cli.main import parse_args
from npu_plugin.cli.migrate import run

GOLDEN = Path(__file__).resolve().parents[2] / "fixtures" / "migrate"
REPO = Path(__file__).resolve().parents[3]
BAD = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources:\n"
    "      limits: {huawei.com/Ascend910: -1}\n"
)


def parse(*argv: str) -> argparse.Namespace:
    return parse_args(["migrate", *argv], {})


def golden(case: str, suffix: str) -> str:
    return (GOLDEN / f"{case}.{suffix}.yaml").read_text(encoding="utf-8")


def test_flags_and_defaults() -> None:
    args = parse()
    assert (args.filename, args.output, args.resource_name, args.device_class) == ("-", None, None, None)
    assert (args.in_place, args.same_topology_group, args.check, args.command) == (False, False, False, "migrate")
    args = parse(
        "-f",
        "in.yaml",
        "-o",
        "out.yaml",
        "--resource-name",
        "huawei.com/Ascend310P",
        "--resource-name",
        "huawei.com/Ascend310",
        "--device-class",
        "ascend.npu.huawei.com",
        "--same-topology-group",
        "--check",
    )
    assert (
        args.filename,
        args.output,
        args.resource_name,
        args.device_class,
        args.same_topology_group,
        args.check,
    ) == ("in.yaml", "out.yaml", ["huawei.com/Ascend310P", "huawei.com/Ascend310"], "ascend.npu.huawei.com", True, True)


@pytest.mark.parametrize(("flag", "value"), [("--device-class", "Bad_Class"), ("--resource-name", "Ascend910")])
def test_bad_flag_values_are_refused(flag: str, value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        parse(flag, value)
    assert caught.value.code == 2
    assert f"argument {flag}: '{value}' is not " in capsys.readouterr().err


def test_file_to_file(tmp_path: Path) -> None:
    source, target = tmp_path / "in.yaml", tmp_path / "out.yaml"
    source.write_text(golden("helm", "in"), encoding="utf-8")
    assert run(parse("-f", str(source), "-o", str(target))) == 0
    assert target.read_text(encoding="utf-8") == golden("helm", "out")


def test_in_place_keeps_the_file_mode(tmp_path: Path) -> None:
    path = tmp_path / "app.yaml"
    path.write_text(golden("containers", "in"), encoding="utf-8")
    path.chmod(0o640)
    assert run(parse("-f", str(path), "-o", str(path))) == 0
    assert path.read_text(encoding="utf-8") == golden("containers", "out")
    assert path.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["app.yaml"]


def test_error_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "bad.yaml", tmp_path / "out.yaml"
    source.write_text(BAD, encoding="utf-8")
    target.write_text("previous\n", encoding="utf-8")
    assert run(parse("-f", str(source), "-o", str(target))) == 1
    assert target.read_text(encoding="utf-8") == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml", "out.yaml"]
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f'npu-plugin migrate: error: {source}:8: document 1 (Pod p), container "c": '
        "limits[huawei.com/Ascend910] must be a whole number of NPUs (0 or more), got -1\n"
    )


def test_unreadable_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    assert run(parse("-f", str(missing))) == 1
    assert capsys.readouterr().err == f"npu-plugin migrate: error: cannot read {missing}: No such file or directory\n"
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"a: caf\xe9\n")
    assert run(parse("-f", str(latin))) == 1
    expected = f"npu-plugin migrate: error: {latin}:1: document 1: not UTF-8 text (invalid byte at offset 6)\n"
    assert capsys.readouterr().err == expected


def test_unwritable_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "in.yaml"
    source.write_text(golden("helm", "in"), encoding="utf-8")
    assert run(parse("-f", str(source), "-o", str(tmp_path / "no-such-dir" / "out.yaml"))) == 1
    assert capsys.readouterr().err.startswith("npu-plugin migrate: error: cannot write ")


def test_check_lists_changes_and_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source, target = tmp_path / "in.yaml", tmp_path / "out.yaml"
    source.write_text(golden("topology-group", "in"), encoding="utf-8")
    assert run(parse("-f", str(source), "-o", str(target), "--check")) == 1
    assert not target.exists()
    assert capsys.readouterr().out.splitlines() == [
        f'would migrate {source}:15: Job ml/allreduce, container "rank": huawei.com/Ascend910: 4 -> claim '
        '"rank-npu" from ResourceClaimTemplate ml/allreduce-rank-npu',
        f'would migrate {source}:20: Job ml/allreduce, container "probe": huawei.com/Ascend910: 1 -> claim '
        '"probe-npu" from ResourceClaimTemplate ml/allreduce-probe-npu',
    ]


@pytest.mark.parametrize("case", ["topology-group", "untouched"])
def test_check_passes_on_migrated_output(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "out.yaml"
    source.write_text(golden(case, "out"), encoding="utf-8")
    assert run(parse("-f", str(source), "--check")) == 0
    assert capsys.readouterr().out == ""


def test_warnings_go_to_stderr(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(golden("untouched", "in").encode())))
    assert run(parse()) == 0
    captured = capsys.readouterr()
    assert captured.out == golden("untouched", "in")
    assert captured.err == (
        "npu-plugin migrate: warning: <stdin>:44: document 3: v1/ResourceQuota ml/npu-quota: "
        "spec.hard[requests.huawei.com/Ascend910] counts only device-plugin pods; DRA claims count against "
        'spec.hard[ascend910.npu.huawei.com.deviceclass.resource.k8s.io/devices]: "16"\n'
        "npu-plugin migrate: migrated 0 containers in 0 workloads\n"
    )


def _cli(*argv: str, stdin: bytes, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("NPU_PLUGIN_")} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "npu_plugin", "migrate", *argv],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=environ,
        check=False,
        timeout=60,
    )


def test_stdin_to_stdout_through_the_cli() -> None:
    done = _cli("-f", "-", stdin=golden("every-kind", "in").encode())
    assert (done.returncode, done.stderr) == (0, b"npu-plugin migrate: migrated 9 containers in 9 workloads\n")
    assert done.stdout.decode() == golden("every-kind", "out")


def test_environment_twin_through_the_cli() -> None:
    done = _cli(stdin=golden("topology-group", "in").encode(), env={"NPU_PLUGIN_SAME_TOPOLOGY_GROUP": "true"})
    assert done.returncode == 0
    assert done.stdout.decode() == golden("topology-group", "out")


def test_the_environment_twins_of_other_commands_do_not_reach_migrate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    environ = {"NPU_PLUGIN_OUTPUT": "json", "NPU_PLUGIN_RESOURCE_NAME": "auto"}  # inventory -o, serve --resource-name
    source = tmp_path / "in.yaml"
    source.write_text(golden("helm", "in"), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    args = parse_args(["migrate", "-f", str(source)], environ)
    assert (args.output, args.resource_name) == (None, None)
    assert run(args) == 0
    assert capsys.readouterr().out == golden("helm", "out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.yaml"]
    assert (parse_args(["inventory"], environ).output, parse_args(["serve"], environ).resource_name) == ("json", "auto")
    # plan's -o takes fewer values than inventory's: the variable set for inventory must not stop it.
    assert parse_args(["plan"], {"NPU_PLUGIN_OUTPUT": "resourceslice"}).output == "table"
    with pytest.raises(SystemExit):
        parse_args(["migrate", "--help"], environ)
    out = " ".join(capsys.readouterr().out.split())
    assert "env: none, NPU_PLUGIN_OUTPUT is inventory's)" in out
    assert "env: none, NPU_PLUGIN_RESOURCE_NAME is serve's)" in out


def test_bad_flag_exits_2_through_the_cli() -> None:
    done = _cli("--device-class", "Bad_Class", stdin=b"")
    assert done.returncode == 2
    assert b"--device-class" in done.stderr
    assert b"Traceback" not in done.stderr


def test_invalid_yaml_through_the_cli() -> None:
    done = _cli(stdin=b"a: 1\nb: [1\nc: 2\n")
    assert (done.returncode, done.stdout) == (1, b"")
    assert done.stderr == (
        b"npu-plugin migrate: error: <stdin>:3:2: document 1: invalid YAML: while parsing a flow sequence, "
        b"expected ',' or ']', but got ':'\n"
    )


LEFT_BEHIND = (
    "apiVersion: example.com/v1\nkind: Trainer\nmetadata: {name: t}\nspec:\n"
    "  pod: {containers: [{name: c, resources: {limits: {huawei.com/Ascend910: 1}}}]}\n"
)


def test_left_behind_exits_3_after_writing_and_check_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "in.yaml", tmp_path / "out.yaml"
    source.write_text(golden("helm", "in") + "---\n" + LEFT_BEHIND, encoding="utf-8")
    assert run(parse("-f", str(source), "-o", str(target))) == 3
    assert target.read_text(encoding="utf-8") == golden("helm", "out") + "---\n" + LEFT_BEHIND
    err = capsys.readouterr().err.splitlines()
    assert err[-2].startswith(f"npu-plugin migrate: warning: {source}:")
    assert "example.com/v1/Trainer t: spec.pod.containers[0].resources.limits still asks for" in err[-2]
    assert err[-1] == "npu-plugin migrate: migrated 1 container in 1 workload, skipped 1 (see above)"
    assert run(parse("-f", str(target), "--check")) == 1
    assert capsys.readouterr().out == ""


def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): p.read_text(encoding="utf-8") for p in sorted(root.rglob("*")) if p.is_file()}


def _manifest_tree(root: Path) -> None:
    (root / "apps" / "deep").mkdir(parents=True)
    (root / ".git").mkdir()
    (root / "apps" / "train.yaml").write_text(golden("helm", "in"), encoding="utf-8")
    (root / "apps" / "deep" / "job.yml").write_text(golden("topology-group", "in"), encoding="utf-8")
    (root / "notes.txt").write_text("huawei.com/Ascend910: 1\n", encoding="utf-8")
    (root / ".git" / "x.yaml").write_text("not: [yaml\n", encoding="utf-8")
    (root / "plain.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c}\n", encoding="utf-8")


def test_directory_in_place_rewrites_only_what_changes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _manifest_tree(tmp_path)
    before = _tree(tmp_path)
    plain_mtime = (tmp_path / "plain.yaml").stat().st_mtime_ns
    assert run(parse("-f", str(tmp_path), "--check")) == 1
    assert _tree(tmp_path) == before
    assert run(parse("-f", str(tmp_path), "--in-place")) == 0
    after = _tree(tmp_path)
    assert after["apps/train.yaml"] == golden("helm", "out")
    assert after["apps/deep/job.yml"] == migrate_text_default(golden("topology-group", "in"))
    assert {k: v for k, v in after.items() if not k.startswith("apps/")} == {
        k: v for k, v in before.items() if not k.startswith("apps/")
    }
    assert (tmp_path / "plain.yaml").stat().st_mtime_ns == plain_mtime
    assert capsys.readouterr().err.endswith("npu-plugin migrate: migrated 3 containers in 2 workloads\n")
    assert run(parse("-f", str(tmp_path), "--check")) == 0


def migrate_text_default(text: str) -> str:
    from npu_plugin.migrate import migrate_text

    return migrate_text(text).text


def test_directory_to_a_copy(tmp_path: Path) -> None:
    source, copy = tmp_path / "src", tmp_path / "copy"
    source.mkdir()
    _manifest_tree(source)
    before = _tree(source)
    assert run(parse("-f", str(source), "-o", str(copy))) == 0
    assert _tree(source) == before
    assert sorted(_tree(copy)) == ["apps/deep/job.yml", "apps/train.yaml", "plain.yaml"]
    assert _tree(copy)["apps/train.yaml"] == golden("helm", "out")


def test_one_bad_file_in_a_directory_is_skipped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _manifest_tree(tmp_path)
    bad = tmp_path / "zz-bad.yaml"
    bad.write_text(BAD, encoding="utf-8")
    assert run(parse("-f", str(tmp_path), "--in-place")) == 1
    assert bad.read_text(encoding="utf-8") == BAD
    assert _tree(tmp_path)["apps/train.yaml"] == golden("helm", "out")
    err = capsys.readouterr().err
    assert err.startswith(f'npu-plugin migrate: error: {bad}:8: document 1 (Pod p), container "c": ')
    assert err.splitlines()[0].endswith("; file skipped")


HELM_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "train.fullname" . }}
spec:
  template:
    spec:
      containers:
      - name: trainer
        resources:
          {{- toYaml .Values.resources | nindent 10 }}
"""


def _chart_tree(root: Path) -> None:
    """A Helm chart beside plain manifests and a broken file."""
    chart = root / "charts" / "train"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: train\nversion: 0.1.0\n", encoding="utf-8")
    (chart / "values.yaml").write_text("resources:\n  limits: {huawei.com/Ascend910: 8}\n", encoding="utf-8")
    (chart / "templates" / "deployment.yaml").write_text(HELM_DEPLOYMENT, encoding="utf-8")
    (root / "apps").mkdir()
    (root / "apps" / "train.yaml").write_text(golden("helm", "in"), encoding="utf-8")
    (root / "apps" / "broken.yaml").write_text("a: [1\n", encoding="utf-8")


def test_a_helm_chart_and_a_broken_file_are_skipped_and_the_rest_migrated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _chart_tree(tmp_path)
    before = _tree(tmp_path)
    chart, broken = tmp_path / "charts" / "train", tmp_path / "apps" / "broken.yaml"
    skipped = [
        f"npu-plugin migrate: error: {broken}:2:1: document 1: invalid YAML: while parsing a flow sequence, expected "
        "',' or ']', but got '<stream end>'; file skipped",
        f"npu-plugin migrate: error: {chart}: a Helm chart (Chart.yaml), whose templates are not manifests; skipped: "
        f"migrate what it renders (helm template RELEASE {chart} | npu-plugin migrate), or leave it out with --exclude",
    ]
    assert run(parse("-f", str(tmp_path), "--check")) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(f"would migrate {tmp_path / 'apps' / 'train.yaml'}:")
    assert captured.err.splitlines()[:2] == skipped
    assert captured.err.endswith(
        "npu-plugin migrate: would migrate 1 container in 1 workload; 2 skipped for errors (see above)\n"
    )
    assert _tree(tmp_path) == before
    assert run(parse("-f", str(tmp_path), "--in-place")) == 1
    assert capsys.readouterr().err.splitlines()[:2] == skipped
    after = _tree(tmp_path)
    assert after.pop("apps/train.yaml") == golden("helm", "out")
    assert after == {k: v for k, v in before.items() if k != "apps/train.yaml"}
    assert run(parse("-f", str(tmp_path), "--check", "--exclude", "charts", "--exclude", "apps/broken.*")) == 0
    assert capsys.readouterr().err == "npu-plugin migrate: would migrate 0 containers in 0 workloads\n"


EXCLUDES = [
    ("a name at any depth", ["templates"], ["a.yaml", "b.yml", "x/b.yaml"]),
    ("a path below DIR", ["x/templates"], ["a.yaml", "b.yml", "templates/t.yaml", "x/b.yaml"]),
    ("a pattern on file names", ["*.yml"], ["a.yaml", "templates/t.yaml", "x/b.yaml", "x/templates/t.yaml"]),
    ("several", ["templates", "a.*"], ["b.yml", "x/b.yaml"]),
]


@pytest.mark.parametrize(("globs", "kept"), [e[1:] for e in EXCLUDES], ids=[e[0] for e in EXCLUDES])
def test_exclude(globs: list[str], kept: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("a.yaml", "b.yml", "templates/t.yaml", "x/b.yaml", "x/templates/t.yaml"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(golden("helm", "in"), encoding="utf-8")
    assert run(parse("-f", str(tmp_path), "--check", *(f"--exclude={glob}" for glob in globs))) == 1
    found = re.findall(r"^would migrate (\S+):\d+: ", capsys.readouterr().out, re.MULTILINE)
    assert [str(Path(path).relative_to(tmp_path)) for path in found] == kept


USAGE = [
    ("directory without a destination", ["-f", "{dir}"], "is a directory: give --in-place, or -o DIR"),
    ("in place and -o", ["-f", "{dir}", "--in-place", "-o", "x"], "--in-place and -o exclude each other"),
    ("in place on stdin", ["--in-place"], "--in-place needs -f FILE or -f DIR, not stdin"),
    ("exclude without a directory", ["--exclude", "x", "-f", "{dir}/a.yaml"], "--exclude needs -f DIR"),
]


@pytest.mark.parametrize(("argv", "message"), [u[1:] for u in USAGE], ids=[u[0] for u in USAGE])
def test_flags_that_do_not_fit_exit_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(parse(*(a.replace("{dir}", str(tmp_path)) for a in argv))) == 2
    err = capsys.readouterr().err
    assert err.startswith("npu-plugin migrate: error: ") and message in err


def test_a_resource_name_that_matches_nothing_lists_what_was_seen(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "hami.yaml"
    source.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources:\n"
        "      limits: {huawei.com/Ascend910B: 1, huawei.com/Ascend910B-memory: 4096}\n",
        encoding="utf-8",
    )
    assert (
        run(parse("-f", str(source), "--check", "--resource-name", "huawei.com/Ascend301", "--device-class", "x.y"))
        == 0
    )
    assert (
        "npu-plugin migrate: warning: --resource-name huawei.com/Ascend301 matches nothing; found: "
        "huawei.com/Ascend910B, huawei.com/Ascend910B-memory\n" in capsys.readouterr().err
    )
    assert run(parse("-f", str(source), "--check")) == 0
    assert (
        "npu-plugin migrate: warning: no container asks for huawei.com/Ascend910, huawei.com/Ascend310P, "
        "huawei.com/Ascend310; the input asks for huawei.com/Ascend910B, huawei.com/Ascend910B-memory: choose "
        "with --resource-name\n" in capsys.readouterr().err
    )


NPU_POD = (
    "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n  - name: c\n    resources:\n"
    "      limits: {huawei.com/Ascend910: 1}\n"
)


def test_a_mistyped_resource_name_says_what_the_input_asks_for(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "p.yaml"
    source.write_text(NPU_POD, encoding="utf-8")
    assert run(parse("-f", str(source), "--check", "--resource-name", "huawei.com/Ascend91O")) == 0
    err = capsys.readouterr().err
    warning = "warning: --resource-name huawei.com/Ascend91O matches nothing; found: huawei.com/Ascend910\n"
    assert f"npu-plugin migrate: {warning}" in err
    assert "DeviceClass" not in err
    source.write_text(NPU_POD.replace("Ascend910", "Ascend910B"), encoding="utf-8")
    assert run(parse("-f", str(source), "--resource-name", "huawei.com/Ascend910B")) == 1
    assert capsys.readouterr().err == (
        f'npu-plugin migrate: error: {source}:8: document 1 (Pod p), container "c": huawei.com/Ascend910B has no '
        "default DeviceClass: give --device-class\n"
    )


ANNOTATION_ENV = (
    "    env:\n    - name: ASCEND_VISIBLE_DEVICES\n"
    "      valueFrom: {fieldRef: {fieldPath: \"metadata.annotations['huawei.com/Ascend910']\"}}\n"
)


def test_check_fails_while_a_migrated_workload_reads_the_device_plugin_s_annotation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "p.yaml"
    source.write_text(NPU_POD + ANNOTATION_ENV, encoding="utf-8")
    assert run(parse("-f", str(source), "--in-place")) == 0
    capsys.readouterr()
    assert run(parse("-f", str(source), "--check")) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f'npu-plugin migrate: warning: {source}:26: document 2: Pod p, container "c": env ASCEND_VISIBLE_DEVICES '
        "reads the pod annotation huawei.com/Ascend910, which nothing sets under DRA; drop it: the claim's CDI spec "
        "injects ASCEND_VISIBLE_DEVICES\n"
        "npu-plugin migrate: would migrate 0 containers in 0 workloads\n"
    )
    source.write_text(source.read_text(encoding="utf-8").replace(ANNOTATION_ENV, ""), encoding="utf-8")
    assert run(parse("-f", str(source), "--check")) == 0


def test_check_reports_a_job_that_takes_part_in_the_rank_table(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "job.yaml"
    labelled = NPU_POD.replace(
        "metadata: {name: p}", "metadata: {name: p, labels: {ring-controller.atlas: ascend-910}}"
    )
    source.write_text(labelled, encoding="utf-8")
    assert run(parse("-f", str(source), "--check")) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(
        f"npu-plugin migrate: warning: {source}:3: document 1: Pod p: takes part in MindCluster's HCCL rank table "
        "(label ring-controller.atlas=ascend-910): npu-plugin writes the pod annotations huawei.com/kltDev, "
    )
    assert err[1:] == ["npu-plugin migrate: would migrate 1 container in 1 workload"]
    assert run(parse("-f", str(source), "--in-place")) == 0
    assert "rank table" in capsys.readouterr().err
    assert run(parse("-f", str(source), "--check")) == 0  # a warning, not something left to fix


JSON_DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ml"},
    "spec": {
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i", "resources": {"limits": {"huawei.com/Ascend910": 2}}}]},
        },
    },
}


@pytest.mark.parametrize("wrapped", [False, True], ids=["object", "list"])
def test_json_files_stay_json(wrapped: bool, tmp_path: Path) -> None:
    source = {"apiVersion": "v1", "kind": "List", "items": [JSON_DEPLOYMENT]} if wrapped else JSON_DEPLOYMENT
    path = tmp_path / "web.json"
    path.write_text(json.dumps(source, indent=4) + "\n", encoding="utf-8")
    assert run(parse("-f", str(tmp_path), "--in-place")) == 0
    text = path.read_text(encoding="utf-8")
    migrated = json.loads(text)
    assert text.startswith('{\n    "apiVersion": "v1",\n    "kind": "List",\n') and text.endswith("}\n")
    assert [(o["kind"], o["metadata"]["name"]) for o in migrated["items"]] == [
        ("ResourceClaimTemplate", "web-c-npu"),
        ("Deployment", "web"),
    ]
    spec = migrated["items"][1]["spec"]["template"]["spec"]
    assert spec["containers"][0]["resources"] == {"claims": [{"name": "c-npu"}]}
    assert spec["resourceClaims"] == [{"name": "c-npu", "resourceClaimTemplateName": "web-c-npu"}]
    assert run(parse("-f", str(tmp_path), "--check")) == 0


def test_invalid_json_names_file_line_and_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.json"
    path.write_text('{\n  "kind": "Pod",\n  "spec": }\n', encoding="utf-8")
    assert run(parse("-f", str(path), "-o", str(tmp_path / "out.json"))) == 1
    assert capsys.readouterr().err == (
        f"npu-plugin migrate: error: {path}:3:11: document 1: invalid JSON: Expecting value\n"
    )
    assert not (tmp_path / "out.json").exists()


def test_non_utf8_in_a_later_document(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "two.yaml"
    path.write_bytes(b"a: 1\n---\nb: 2\nc: caf\xe9\n")
    assert run(parse("-f", str(path))) == 1
    assert capsys.readouterr().err == (
        f"npu-plugin migrate: error: {path}:4: document 2: not UTF-8 text (invalid byte at offset 20)\n"
    )
