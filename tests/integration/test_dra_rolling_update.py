"""Two pods of the dra DaemonSet publishing one node's pool at once, as during a rolling update
(maxSurge 1): the old pod's and the new pod's SlicePublisher against one API server, each with its
own client, counting the slice writes the server stored."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from npu_plugin.ascend.vnpu import VnpuChips
from npu_plugin.backends.fake.profiles import profile_inventory
from npu_plugin.config import UnhealthyPolicy
from npu_plugin.dra import publisher as publisher_module
from npu_plugin.dra.publisher import SlicePublisher
from npu_plugin.dra.slice_owners import publisher_of
from npu_plugin.inventory.ownership import Owner
from npu_plugin.inventory.state import Inventory
from npu_plugin.kubeapi.client import KubeClient, connect
from tests.integration.test_dra_vnpu_publishing import dynamic_chips, layout, slice_writes
from tests.support.dra import DRIVER, NODE, node_slices, pool_settled
from tests.support.fakeapi import FakeKubeAPI

pytest_plugins = ["tests.support.dra_fixtures"]
WHOLE = [(0, 8)]  # --vnpu off: one slice of eight whole NPUs
SPLIT = [(8, 0), (0, 56)]  # --vnpu dynamic on 1.37: a counter slice and a slice of NPUs and templates


class Pod:
    """One plugin pod's publisher, running on the test's loop until `stop`."""

    def __init__(self, api: FakeKubeAPI, kubeconfig: Path, uid: str, vnpu: Callable[[], VnpuChips] | None) -> None:
        self.uid, self._client = uid, KubeClient(connect(kubeconfig))
        inventory = Inventory(
            profile_inventory("atlas-800t-a2").devices, failure_threshold=1, recovery_threshold=1, owners=Owner.DRA
        )
        self.publisher = SlicePublisher(
            self._client,
            inventory,
            driver=DRIVER,
            node_name=NODE,
            unhealthy_policy=UnhealthyPolicy.REMOVE,
            vnpu=vnpu,
            instance=uid,
        )
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self.publisher.run(self._stop))

    async def stop(self) -> None:
        self._stop.set()
        await self._task
        self._client.close()


async def until(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        assert time.monotonic() < deadline, f"not reached in {timeout} s: {what}"
        await asyncio.sleep(0.05)


@contextmanager
def api_at_1_37(api: FakeKubeAPI, tmp_path: Path) -> Iterator[Path]:
    api.set_kubernetes_version(37)
    api.write_kubeconfig(tmp_path / "kc")
    yield tmp_path / "kc"


def writers(api: FakeKubeAPI) -> set[str | None]:
    return {publisher_of(s) for s in node_slices(api)}  # type: ignore[arg-type]


def test_old_and_new_pod_with_different_settings_do_not_rewrite_each_others_slices(
    fake_api: FakeKubeAPI, tmp_path: Path
) -> None:
    """The update turns --vnpu dynamic on: the new pod's first write goes out at once, then neither
    writes while both run (2 s here, four coalescing periods; without the hold, about 16 writes)."""
    with api_at_1_37(fake_api, tmp_path) as kubeconfig:

        async def rollout() -> None:
            old = Pod(fake_api, kubeconfig, "old-pod", None)
            await until(lambda: layout(fake_api) == WHOLE, 10, "the old pod's slice")
            assert len(slice_writes(fake_api)) == 1
            new = Pod(fake_api, kubeconfig, "new-pod", dynamic_chips)
            await until(lambda: layout(fake_api) == SPLIT and writers(fake_api) == {"new-pod"}, 10, "the new layout")
            settled = len(slice_writes(fake_api))
            assert settled == 3  # the old slice rewritten, the second slice created
            await asyncio.sleep(2)
            assert len(slice_writes(fake_api)) == settled, slice_writes(fake_api)[settled:]
            await old.stop()  # the DaemonSet deletes the old pod
            await asyncio.sleep(0.5)
            await new.stop()

        asyncio.run(rollout())
    assert layout(fake_api) == SPLIT and writers(fake_api) == {"new-pod"}


def test_a_new_pod_with_the_same_settings_writes_nothing(fake_api: FakeKubeAPI, tmp_path: Path) -> None:
    """The seamless upgrade: the slices the old pod wrote stay exactly as they are."""
    with api_at_1_37(fake_api, tmp_path) as kubeconfig:

        async def rollout() -> None:
            old = Pod(fake_api, kubeconfig, "old-pod", dynamic_chips)
            await until(lambda: layout(fake_api) == SPLIT, 10, "the old pod's slices")
            new = Pod(fake_api, kubeconfig, "new-pod", dynamic_chips)
            await asyncio.wait_for(new.publisher.published.wait(), 10)
            await asyncio.sleep(0.5)
            await old.stop()
            await asyncio.sleep(0.5)
            await new.stop()

        asyncio.run(rollout())
    assert len(slice_writes(fake_api)) == 2 and writers(fake_api) == {"old-pod"}


def test_a_holding_pod_takes_the_pool_back_when_the_hold_ends_and_the_other_is_gone(
    fake_api: FakeKubeAPI, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A new pod that fails after its first write (crash loop): the old pod, which the kubelet
    falls back to, publishes its own slices again once the hold is over, and only then."""
    monkeypatch.setattr(publisher_module, "PEER_HOLD_SECONDS", 1.0)
    with api_at_1_37(fake_api, tmp_path) as kubeconfig:

        async def rollout() -> None:
            old = Pod(fake_api, kubeconfig, "old-pod", None)
            await until(lambda: layout(fake_api) == WHOLE, 10, "the old pod's slice")
            new = Pod(fake_api, kubeconfig, "new-pod", dynamic_chips)
            await until(lambda: layout(fake_api) == SPLIT, 10, "the new layout")
            taken = time.monotonic()
            await new.stop()
            await until(lambda: layout(fake_api) == WHOLE and writers(fake_api) == {"old-pod"}, 5, "the old slice back")
            assert time.monotonic() - taken >= 0.9
            await old.stop()

        asyncio.run(rollout())
    assert [w.split()[0] for w in slice_writes(fake_api)] == ["create", "update", "create", "update", "delete"]


def test_the_update_that_brings_the_annotation_holds_against_the_old_release_too(
    fake_api: FakeKubeAPI, tmp_path: Path
) -> None:
    """The old pod runs a release whose slices name no writer and which rewrites what differs at once:
    the new pod writes its layout once, the old pod puts its own back (as it would), and the new pod
    leaves that alone while they overlap instead of answering it."""
    with api_at_1_37(fake_api, tmp_path) as kubeconfig:

        async def rollout() -> None:
            old = Pod(fake_api, kubeconfig, "old-pod", None)
            await until(lambda: layout(fake_api) == WHOLE, 10, "the old pod's slice")
            await old.stop()
            [old_slice] = node_slices(fake_api)
            del old_slice["metadata"]["annotations"]  # as the release before the annotation wrote it
            fake_api.put_object("ResourceSlice", old_slice)
            new = Pod(fake_api, kubeconfig, "new-pod", dynamic_chips)
            await until(lambda: layout(fake_api) == SPLIT, 10, "the new layout")
            # The old release's answer: its whole-NPU slice back in place of the new pool.
            for item in node_slices(fake_api):
                fake_api.delete_object("ResourceSlice", item["metadata"]["name"])
            old_slice["spec"]["pool"]["generation"] = 99
            for server_field in ("resourceVersion", "uid"):
                old_slice["metadata"].pop(server_field, None)
            fake_api.put_object("ResourceSlice", old_slice)
            await until(lambda: layout(fake_api) == WHOLE, 5, "the old release's slice stored")
            written = len(slice_writes(fake_api))
            await asyncio.sleep(2)
            assert len(slice_writes(fake_api)) == written and layout(fake_api) == WHOLE
            await new.stop()

        asyncio.run(rollout())


def test_two_pods_starting_together_leave_no_half_pool_behind(fake_api: FakeKubeAPI, tmp_path: Path) -> None:
    """Two pods whose first writes cross (each creates its own slice of a one-slice pool at generation 1):
    the pool then holds two slices where it says one, which a scheduler takes as incomplete, so no
    device of the node is allocatable. Neither pod holds on such a pool: it is repaired at once."""
    with api_at_1_37(fake_api, tmp_path) as kubeconfig:

        async def together() -> None:
            first = Pod(fake_api, kubeconfig, "pod-a", None)
            second = Pod(fake_api, kubeconfig, "pod-b", None)
            await asyncio.wait_for(first.publisher.published.wait(), 10)
            await asyncio.wait_for(second.publisher.published.wait(), 10)
            await until(lambda: pool_settled(fake_api) is not None, 5, "a complete pool")
            await first.stop()
            await second.stop()

        asyncio.run(together())
    slices = pool_settled(fake_api)
    assert slices is not None and len(slices) == 1 and layout(fake_api) == WHOLE
