"""The vNPU series: one per (chip, template, origin) as the node is now, operations by result,
create latency."""

from __future__ import annotations

import pytest

from npu_plugin.ascend.vnpu import Vnpu, VnpuOrigin
from npu_plugin.observability.metrics import Metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_vnpus_are_counted_per_chip_template_and_origin_and_vanished_ones_leave() -> None:
    metrics = Metrics()
    metrics.record_vnpus(
        [
            (Vnpu(0, 100, "vir05_1c_16g"), VnpuOrigin.STATIC),
            (Vnpu(0, 101, "vir05_1c_16g"), VnpuOrigin.STATIC),
            (Vnpu(5, 180, "vir10_3c_32g"), VnpuOrigin.FOREIGN),
        ]
    )
    assert sample(metrics, "npu_plugin_vnpus", physical_id="0", template="vir05_1c_16g", origin="static") == 2
    assert sample(metrics, "npu_plugin_vnpus", physical_id="5", template="vir10_3c_32g", origin="foreign") == 1

    metrics.record_vnpus([(Vnpu(5, 180, "vir10_3c_32g"), VnpuOrigin.FOREIGN)])
    assert sample(metrics, "npu_plugin_vnpus", physical_id="0", template="vir05_1c_16g", origin="static") is None
    assert sample(metrics, "npu_plugin_vnpus", physical_id="5", template="vir10_3c_32g", origin="foreign") == 1


@pytest.mark.parametrize(
    ("op", "result", "seconds", "timed"),
    [
        ("create", "success", 0.2, 1),
        ("create", "refused", 0.2, 0),
        ("create", "error", None, 0),
        ("destroy", "success", 0.1, 0),
    ],
)
def test_operations_count_by_result_and_only_successful_creates_are_timed(
    op: str, result: str, seconds: float | None, timed: int
) -> None:
    metrics = Metrics()
    metrics.record_vnpu_operation(op, result, seconds)  # type: ignore[arg-type]
    assert sample(metrics, "npu_plugin_vnpu_operations_total", op=op, result=result) == 1
    assert sample(metrics, "npu_plugin_vnpu_create_seconds_count") == timed


def test_every_operation_series_exists_before_the_first_call() -> None:
    metrics = Metrics()
    for op in ("create", "destroy"):
        for result in ("success", "error", "refused"):
            assert sample(metrics, "npu_plugin_vnpu_operations_total", op=op, result=result) == 0
    assert sample(metrics, "npu_plugin_vnpu_dynamic_available") == 0
