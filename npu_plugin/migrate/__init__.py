"""`npu-plugin migrate`: rewrite workloads from extended-resource NPU limits to DRA claims,
losslessly.

The transform (and ruamel.yaml) loads on first use, so `npu-plugin serve` never pays for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npu_plugin.migrate.options import Options

if TYPE_CHECKING:
    from npu_plugin.migrate.transform import Change, Result, migrate_text

__all__ = ["Change", "Options", "Result", "migrate_text"]


def __getattr__(name: str) -> Any:
    if name in ("Change", "Result", "migrate_text"):
        from npu_plugin.migrate import transform

        return getattr(transform, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
