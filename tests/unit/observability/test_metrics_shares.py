"""Shares per shared NPU: offered and in use, read at scrape time."""

from __future__ import annotations

from npu_plugin.observability.metrics import Metrics


def test_shares_in_use_are_read_per_chip_at_scrape_time() -> None:
    metrics = Metrics()
    held: dict[int, int] = {0: 2}
    metrics.count_shares(lambda: held, lambda: {0: 4, 1: 4})

    def sample(name: str, chip: int) -> float | None:
        return metrics.registry.get_sample_value(name, {"physical_id": str(chip)})

    assert [sample("npu_plugin_shares_in_use", c) for c in (0, 1)] == [2, 0]
    assert [sample("npu_plugin_shares", c) for c in (0, 1)] == [4, 4]
    held[1] = 3
    del held[0]
    assert [sample("npu_plugin_shares_in_use", c) for c in (0, 1)] == [0, 3]
