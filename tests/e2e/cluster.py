"""The e2e tier's handle on the local cluster of scripts/cluster: bring it up in a mode, run kubectl
against it, wait for what the real components do, take it down."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "cluster"
STATE = Path("/var/lib/npu-plugin-cluster")
KUBECONFIG = STATE / "kubeconfig"
KUBECTL = STATE / "bin" / "kubectl"
# kubectl's discovery cache, inside the cluster's state (removed by down) instead of ~/.kube/cache: the
# security tests watch for files written outside the places a run may use.
KUBE_CACHE = STATE / "kube-cache"
NODE = "127.0.0.1"
# Where scripts/cluster makes the fake NPUs' character devices (the plugin's --dev-root), and the fake
# backend's inventory file there, which the plugin re-reads whenever it changes.
DEV_ROOT = "/dev/npu-plugin-cluster"
FAKE_INVENTORY = Path(DEV_ROOT) / "fake-inventory.yaml"
PLUGIN_NAMESPACE = "npu-plugin"
MODE_LABEL = "npu.huawei.com/plugin-mode"
# What tests create, in any namespace but the plugin's (whose pods each deploy replaces); owners before
# what they own, so that a clean-up deletes an owner before its pods.
WORKLOADS = "deployments,daemonsets,statefulsets,jobs,replicasets,pods,resourceclaimtemplates,resourceclaims"
# The fake profile scripts/cluster deploys (atlas-800-9000): eight Ascend910 in two HCCS rings of four,
# ring 0 on NUMA node 0 and ring 1 on NUMA node 1.
RINGS = (frozenset({0, 1, 2, 3}), frozenset({4, 5, 6, 7}))
ENABLE = "NPU_PLUGIN_E2E"
RELEASE = "NPU_PLUGIN_E2E_KUBERNETES"

T = TypeVar("T")


def enabled() -> bool:
    return os.environ.get(ENABLE, "") not in ("", "0")


def release() -> str:
    return os.environ.get(RELEASE, "1.37")


class KubectlError(RuntimeError):
    pass


class Cluster:
    def __init__(self, release: str, mode: str, options: Sequence[str] = (), *, feature_gates: str = "") -> None:
        """`options`: scripts/cluster's plugin options (`--env NAME=VALUE`, `--fake-profile NAME`);
        `feature_gates` (NAME=BOOL,...) go over the release's own at `up`."""
        self.release, self.mode, self.options = release, mode, tuple(options)
        self.feature_gates = feature_gates

    def up(self) -> None:
        gates = ("--feature-gates", self.feature_gates) if self.feature_gates else ()
        self._script("up", "--kubernetes", self.release, *gates, "--mode", self.mode, *self.options)

    def deploy(self, mode: str, options: Sequence[str] = ()) -> None:
        """The plugin redeployed on the running cluster (`scripts/cluster deploy`): the fake inventory written
        afresh, the node relabelled for `mode`, the overlay applied, and the rollout waited for (there is
        none when mode and options are the ones deployed)."""
        self._script("deploy", "--mode", mode, *options)
        self.mode, self.options = mode, tuple(options)

    def _script(self, *args: str) -> None:
        run = subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"scripts/cluster {args[0]} failed ({run.returncode}):\n{run.stderr[-4000:]}")
        sys.stderr.write(run.stderr)  # its steps and their times, shown with -s or in a failing test's report

    def down(self) -> None:
        self._script("down")

    def footprint(self) -> dict[str, str]:
        """What a test module may change on the shared cluster and must put back, by what it is: the
        workload objects outside the plugin's namespace, the DeviceClasses and namespaces, the node's
        labels (but the mode label, which each deploy sets), taints and schedulability, and the fake
        backend's inventory (parsed: a test rewrites it in its own YAML style)."""
        found = {
            f"{o['kind']} {o['metadata'].get('namespace', '')}/{o['metadata']['name']}": "exists"
            for o in [*self.get(WORKLOADS, "--all-namespaces")["items"], *self.get("deviceclasses,namespaces")["items"]]
            if o["metadata"].get("namespace") != PLUGIN_NAMESPACE
        }
        node = self.get("node", NODE)
        labels = {k: v for k, v in node["metadata"].get("labels", {}).items() if k != MODE_LABEL}
        found["node labels"] = json.dumps(labels, sort_keys=True)
        found["node taints"] = json.dumps(node["spec"].get("taints", []), sort_keys=True)
        found["node unschedulable"] = str(node["spec"].get("unschedulable", False))
        inventory = yaml.safe_load(FAKE_INVENTORY.read_text(encoding="utf-8"))
        found["fake inventory"] = hashlib.sha256(json.dumps(inventory, sort_keys=True).encode()).hexdigest()
        return found

    def restore(self, before: Mapping[str, str], settle: float = 60) -> list[str]:
        """Put back what a module left (see `footprint`) and say what it was: objects it added are deleted,
        the node uncordoned; the inventory and the mode label are the next deploy's to reset. What goes
        after a test has ended (a deleted pod's claim, which the garbage collector removes) is waited for
        up to `settle` seconds first."""
        deadline = time.monotonic() + settle
        while (after := self.footprint()) != before and time.monotonic() < deadline:
            time.sleep(1)
        left = [
            f"{key}: {before.get(key, 'absent')} -> {after.get(key, 'absent')}"
            for key in sorted(before.keys() | after.keys())
            if before.get(key) != after.get(key)
        ]
        for key in [key for key in after if key not in before]:
            kind, _, name = key.partition(" ")
            namespace, _, name = name.partition("/")
            where = ["-n", namespace] if namespace else []
            self.kubectl("delete", kind, name, *where, "--ignore-not-found", timeout=120)
        if after["node unschedulable"] != before["node unschedulable"]:
            self.kubectl("uncordon", NODE)
        return left

    def kubectl(self, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
        run = subprocess.run(
            [str(KUBECTL), "--kubeconfig", str(KUBECONFIG), "--cache-dir", str(KUBE_CACHE), *args],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if run.returncode != 0:
            raise KubectlError(f"kubectl {' '.join(args)}: {run.stderr.strip()}")
        return run.stdout

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def apply(self, manifest: str) -> None:
        self.kubectl("apply", "-f", "-", stdin=manifest)

    def delete(self, manifest: str) -> None:
        """The objects of `manifest` deleted and waited for; pods with a 1 s grace period, as the tests' own
        have (a manifest's pod whose shell ignores SIGTERM, as the examples', would take its 30 s)."""
        self.kubectl(
            "delete", "--ignore-not-found", "--wait=true", "--grace-period=1", "-f", "-", stdin=manifest, timeout=120
        )

    @contextmanager
    def applied(self, manifest: str) -> Iterator[None]:
        """The objects of `manifest` for the length of the block; deleted (and waited for) after it."""
        self.apply(manifest)
        try:
            yield
        finally:
            self.delete(manifest)

    def exec(self, pod: str, command: str, container: str = "app") -> str:
        return self.kubectl("exec", pod, "-c", container, "--", "sh", "-c", command)

    def pod(self, name: str) -> Mapping[str, Any]:
        pod: Mapping[str, Any] = self.get("pod", name)
        return pod

    def wait_running(self, name: str, timeout: float = 120) -> Mapping[str, Any]:
        def running() -> Mapping[str, Any] | None:
            pod = self.pod(name)
            phase = pod["status"].get("phase")
            if phase in ("Failed", "Succeeded"):
                raise AssertionError(f"pod {name} ended ({phase}): {self.describe(name)}")
            return pod if phase == "Running" else None

        return wait(running, timeout, lambda: f"pod {name} Running: {self.describe(name)}")

    def unschedulable(self, name: str, timeout: float = 60) -> str:
        """The scheduler's message once it has marked the pod Unschedulable."""

        def message() -> str | None:
            for condition in self.pod(name)["status"].get("conditions", []):
                if condition["type"] == "PodScheduled" and condition.get("reason") == "Unschedulable":
                    return str(condition["message"])
            return None

        return wait(message, timeout, lambda: f"pod {name} Unschedulable: {self.describe(name)}")

    def describe(self, name: str) -> str:
        try:
            return self.kubectl("describe", "pod", name)[-3000:]
        except KubectlError as error:
            return str(error)


def operator_env() -> dict[str, str]:
    """The environment of an operator's shell on this cluster: kubectl on PATH, KUBECONFIG set."""
    return {
        **os.environ,
        "KUBECONFIG": str(KUBECONFIG),
        "KUBECACHEDIR": str(KUBE_CACHE),
        "PATH": f"{KUBECTL.parent}:{os.environ['PATH']}",
    }


def wait(probe: Callable[[], T | None], timeout: float, what: Callable[[], str] | str) -> T:
    """Poll `probe` every half second until it returns something other than None or False."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value is not None and value is not False:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached in {timeout:.0f} s: {what() if callable(what) else what}")
        time.sleep(0.5)
