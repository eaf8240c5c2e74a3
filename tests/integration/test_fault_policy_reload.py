"""`--fault-policy` mounted from a ConfigMap: the kubelet never writes the file, it renames a new
`..data` link over the old and removes the old directory. Every such update is re-read (the second
and later ones too, after the directory the file first resolved to is gone); a bad update is one
error naming the file and line and keeps the policy in force. Real files, real inotify."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from npu_plugin.dra.fault_policy_file import FaultPolicyFile
from npu_plugin.dra.taints import Effect, FaultPolicy, FaultRule
from tests.support.configmap import ConfigMapVolume


def policy(effect: str, code: int = 0x80E01801) -> str:
    return f"- codes: [{code:#x}]\n  effect: {effect}\n"


def rule(effect: Effect, code: int = 0x80E01801) -> FaultPolicy:
    return FaultPolicy((FaultRule(frozenset({code}), effect),))


def test_each_configmap_update_is_reread_and_a_bad_one_keeps_the_policy(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    volume = ConfigMapVolume(tmp_path / "fault-policy")
    volume.write({"faults.yaml": policy("NoSchedule")})
    path = volume.path("faults.yaml")

    async def scenario() -> None:
        changed = asyncio.Event()
        faults = FaultPolicyFile(path, on_change=changed.set)
        assert faults.policy == rule(Effect.NO_SCHEDULE)
        faults.start_watching()
        try:
            for effect in (Effect.NO_EXECUTE, Effect.NONE):  # the second swap: the first target is gone
                changed.clear()
                volume.write({"faults.yaml": policy(effect.value)})
                await asyncio.wait_for(changed.wait(), 10)
                assert faults.policy == rule(effect)
            with caplog.at_level(logging.ERROR, logger="npu_plugin.dra.fault_policy_file"):
                volume.write({"faults.yaml": policy("Evict")})
                while not caplog.records:
                    await asyncio.sleep(0.01)
            (record,) = caplog.records
            assert record.getMessage() == (
                f"fault policy rewrite rejected, keeping the policy in force: --fault-policy {path}:2: "
                "[0].effect: unknown effect 'Evict' (allowed: None, NoSchedule, NoExecute)"
            )
            assert record.exc_info is None
            assert faults.policy == rule(Effect.NONE)
            # Fixed by the next update.
            changed.clear()
            volume.write({"faults.yaml": policy("NoExecute", 0x80E18402)})
            await asyncio.wait_for(changed.wait(), 10)
            assert faults.policy == rule(Effect.NO_EXECUTE, 0x80E18402)
        finally:
            faults.stop_watching()

    asyncio.run(scenario())


def test_a_link_repointed_to_another_directory_follows_the_new_files_writes(tmp_path: Path) -> None:
    """Not a ConfigMap: `path` links to a file elsewhere, re-pointed to a file in a third directory;
    that file's own later writes count."""
    for name, effect in (("a", "NoSchedule"), ("b", "NoExecute")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "faults.yaml").write_text(policy(effect), encoding="utf-8")
    (tmp_path / "etc").mkdir()
    path = tmp_path / "etc" / "faults.yaml"
    path.symlink_to(tmp_path / "a" / "faults.yaml")

    async def scenario() -> None:
        changed = asyncio.Event()
        faults = FaultPolicyFile(path, on_change=changed.set)
        faults.start_watching()
        try:
            (tmp_path / "etc" / "new").symlink_to(tmp_path / "b" / "faults.yaml")
            (tmp_path / "etc" / "new").rename(path)
            await asyncio.wait_for(changed.wait(), 10)
            assert faults.policy == rule(Effect.NO_EXECUTE)
            changed.clear()
            (tmp_path / "b" / "faults.yaml").write_text(policy("None"), encoding="utf-8")
            await asyncio.wait_for(changed.wait(), 10)
            assert faults.policy == rule(Effect.NONE)
        finally:
            faults.stop_watching()

    asyncio.run(scenario())
