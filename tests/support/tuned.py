"""`python -m tests.support.tuned MODULE.NAME=SECONDS... -- ARGS...` runs `npu-plugin ARGS...` with
these module constants set first: a daemon subprocess whose test waits out a product period that no
flag sets (in-process tests set the same constants with monkeypatch)."""

from __future__ import annotations

import importlib
import sys

from npu_plugin.cli.main import main


def tuned(constants: list[str]) -> None:
    for assignment in constants:
        name, _, value = assignment.partition("=")
        module, _, attribute = name.rpartition(".")
        target = importlib.import_module(module)
        if not isinstance(getattr(target, attribute), float):
            raise SystemExit(f"tests.support.tuned: {name} is not a float constant")
        setattr(target, attribute, float(value))


if __name__ == "__main__":
    at = sys.argv.index("--")
    tuned(sys.argv[1:at])
    sys.exit(main(sys.argv[at + 1 :]))
