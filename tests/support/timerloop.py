"""An event loop that notes every timer it is asked for and which task asked: a poll, however slow,
needs one.

Counting timers rather than wakeups over a window keeps a "nothing polls" test independent of the
machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


class TimerLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        super().__init__()
        self.timers_by_task: list[str | None] = []  # the asking task's name, None for a plain callback

    def call_at(self, when: float, callback: Callable[..., object], *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        task = asyncio.current_task(self) if self.is_running() else None
        self.timers_by_task.append(None if task is None else task.get_name())
        return super().call_at(when, callback, *args, **kwargs)


def run_counting_timers(main: Callable[[], Any]) -> tuple[Any, TimerLoop]:
    """Run the coroutine `main()` on a `TimerLoop`; its result and the loop, for its timers."""
    with asyncio.Runner(loop_factory=TimerLoop) as runner:
        result = runner.run(main())
        loop = runner.get_loop()
    assert isinstance(loop, TimerLoop)
    return result, loop
