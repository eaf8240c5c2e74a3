"""The result labels the metrics pre-create are exactly the results the code reports."""

from __future__ import annotations

from typing import get_args

from npu_plugin.deviceplugin import volcano
from npu_plugin.observability.metrics import POD_ANNOTATION_RESULTS, VOLCANO_RESULTS, Metrics
from npu_plugin.podannotations import writer


def test_the_result_labels_are_the_results_reported() -> None:
    assert get_args(writer.Result) == POD_ANNOTATION_RESULTS
    assert get_args(volcano.Result) == VOLCANO_RESULTS


def test_every_result_series_exists_at_zero() -> None:
    registry = Metrics().registry
    for name, results in (
        ("npu_plugin_pod_annotations_total", POD_ANNOTATION_RESULTS),
        ("npu_plugin_volcano_allocations_total", VOLCANO_RESULTS),
    ):
        assert [registry.get_sample_value(name, {"result": r}) for r in results] == [0.0] * len(results)
