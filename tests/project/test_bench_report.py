"""benchmarks/report.py: the table marks every target met or MISSED and counts them."""

from __future__ import annotations

from benchmarks.report import Row, at_most, render


def test_the_table_marks_each_target_and_counts_the_misses() -> None:
    table = render(
        [
            (
                "fast things",
                [
                    Row("Allocate p50", "800 us", "1.2x floor", "<= 1.5x", at_most(1.2, 1.5)),
                    Row("message size", "32 KiB"),
                ],
            ),
            ("slow things", [Row("published", "2.5 s", "", "<= 2 s", at_most(2.5, 2.0))]),
        ]
    ).splitlines()
    assert table[0].split() == ["metric", "value", "context", "target", "status"]
    assert table[1] == "-- fast things" and table[4] == "-- slow things"
    assert table[2].endswith("met") and table[3].endswith("32 KiB") and table[5].endswith("MISSED")
    assert table[-1] == "1 of 2 targets met; 1 MISSED"
