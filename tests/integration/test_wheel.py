"""The wheel the Dockerfile ships: it builds, installs alone in a clean venv, and its command runs.

How dependencies are found (chosen to stay offline and under ~15 s): the wheel is built without
build isolation from a copy of the checkout (so no build/ or *.egg-info lands in the work tree),
then installed with --no-deps into a fresh venv that has no pip and does not see the checkout. The
runtime dependencies come from the test's own interpreter: a `.pth` file appends its site-packages
*after* the venv's own, so `npu_plugin` itself can only come from the wheel, and `pip check` proves
the wheel's Requires-Dist are satisfied by those versions. Set NPU_PLUGIN_TEST_PYPI=1 to also run
the fully clean variant that resolves the dependencies from the package index, as the Dockerfile
does.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What the build must not see: VCS, environments, caches and earlier build outputs.
IGNORED = shutil.ignore_patterns(
    ".git",
    ".venv",
    "venv",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    "tests",
)
TIMEOUT = 120


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run a command, failing the test with its output when it exits non-zero."""
    proc = subprocess.run(
        [str(a) for a in args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc.stdout


def _clean_env() -> dict[str, str]:
    """The caller's environment minus anything that would let Python find the checkout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "PIP_"))}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _version_from_pyproject() -> str:
    match = re.search(r'^version\s*=\s*"([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert match, "pyproject.toml has no static version"
    return match.group(1)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the wheel once, from a copy of the checkout."""
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    shutil.copytree(REPO, src, ignore=IGNORED, symlinks=True)
    out = root / "dist"
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        src,
        "-w",
        out,
        cwd=root,
        env=_clean_env(),
    )
    wheels = list(out.glob("npu_plugin-*.whl"))
    assert len(wheels) == 1, f"expected one npu_plugin wheel, got {wheels}"
    return wheels[0]


def _make_venv(path: Path, *, with_pip: bool) -> Path:
    """A new venv (returns its python), no system site-packages."""
    args: list[str | Path] = [sys.executable, "-m", "venv", path]
    if not with_pip:
        args.append("--without-pip")
    _run(*args, cwd=path.parent, env=_clean_env())
    return path / "bin" / "python"


def _site_packages(python: Path) -> Path:
    out = _run(
        python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=python.parent, env=_clean_env()
    )
    return Path(out.strip())


def test_wheel_contents(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        scripts = zf.read(entry_points).decode()
        metadata = zf.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "npu_plugin/__init__.py" in names
    assert "npu_plugin/__main__.py" in names
    assert "npu_plugin/py.typed" in names, "PEP 561 marker missing: package-data not shipped"
    assert not any(n.startswith(("tests/", "manifests/", "scripts/")) for n in names)
    # The fake API's test-only fidelity (validation, schema, patches, selectors, faults) stays out
    # of the image.
    test_only = ("validation", "schema", "patch", "selectors", "faults", "fielderrors", "names")
    assert not [n for n in names if n.startswith("npu_plugin/sim/") and Path(n).stem in test_only]
    assert "npu_plugin/sim/fakeapi.py" in names, "simulate needs the small fake API server"
    assert re.search(r"^npu-plugin\s*=\s*npu_plugin\.cli\.main:main$", scripts, re.MULTILINE), scripts
    assert f"Version: {_version_from_pyproject()}" in metadata
    assert "Requires-Python: >=3.11" in metadata


def test_wheel_installs_and_runs_in_clean_venv(wheel: Path, tmp_path: Path) -> None:
    python = _make_venv(tmp_path / "venv", with_pip=False)
    env = _clean_env()
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "--no-deps",
        "--no-index",
        wheel,
        cwd=tmp_path,
        env=env,
    )
    # Dependencies from the running interpreter, searched after the venv's own site-packages.
    site = _site_packages(python)
    (site / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    where = _run(python, "-c", "import npu_plugin; print(npu_plugin.__file__)", cwd=tmp_path, env=env)
    assert Path(where.strip()).is_relative_to(site), f"npu_plugin imported from {where.strip()}, not the wheel"

    check = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "check"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    ours = [line for line in check.stdout.splitlines() if line.lower().startswith("npu-plugin")]
    assert not ours, "the wheel's requirements are not met by the dev environment:\n" + "\n".join(ours)

    version = _version_from_pyproject()
    out = _run(tmp_path / "venv" / "bin" / "npu-plugin", "version", cwd=tmp_path, env=env)
    assert version in out
    out = _run(python, "-m", "npu_plugin", "version", cwd=tmp_path, env=env)
    assert version in out


@pytest.mark.skipif(
    os.environ.get("NPU_PLUGIN_TEST_PYPI") != "1",
    reason="set NPU_PLUGIN_TEST_PYPI=1 to resolve dependencies from the package index",
)
def test_wheel_installs_with_dependencies_from_index(wheel: Path, tmp_path: Path) -> None:
    python = _make_venv(tmp_path / "venv", with_pip=True)
    env = _clean_env()
    _run(python, "-m", "pip", "install", "--prefer-binary", wheel, cwd=tmp_path, env=env)
    _run(python, "-m", "pip", "check", cwd=tmp_path, env=env)
    out = _run(tmp_path / "venv" / "bin" / "npu-plugin", "version", cwd=tmp_path, env=env)
    assert _version_from_pyproject() in out


def test_dockerfile_shape() -> None:
    """What the image promises and what cannot be checked without a docker engine here."""
    text = (REPO / "Dockerfile").read_text()
    froms = re.findall(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert len(froms) >= 2, "multi-stage build expected"
    base = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", text, re.MULTILINE)
    assert base, "the base image must be pinned in ARG PYTHON_IMAGE"
    assert re.fullmatch(r"python:3\.11\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", base.group(1)), base.group(1)
    assert "pip wheel" in text and "--no-index" in text
    assert not re.search(r"apt-get install[^\n]*(gcc|build-essential|g\+\+)", text), "no compilers"
    assert re.search(r'^ENTRYPOINT \["npu-plugin"\]$', text, re.MULTILINE)
    assert re.search(r'^CMD \["serve"\]$', text, re.MULTILINE)
    for label in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{label}=" in text, label
    # .dockerignore starts from "*": everything the build COPYs must be let back in.
    allowed = {
        line[1:].rstrip("/") for line in (REPO / ".dockerignore").read_text().splitlines() if line.startswith("!")
    }
    for copy in re.findall(r"^COPY\s+(?!--from)(.+)$", text, re.MULTILINE):
        for source in copy.split()[:-1]:
            assert source.rstrip("/") in allowed, f"COPY {source} is excluded by .dockerignore"
