"""`npu-plugin migrate`: rewrite workloads from extended-resource NPU limits to DRA claims, losslessly."""

from npu_plugin.migrate.transform import Change, Options, Result, migrate_text

__all__ = ["Change", "Options", "Result", "migrate_text"]
