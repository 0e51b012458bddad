"""KL by length bucket (checks/comparison/buckets.py): the statistics, the aggregate's line,
the terminal's line, the HTML chart and the record read back, with values by hand."""

from __future__ import annotations

import dataclasses
import math

import pytest

from pytest_infercheck.checks.comparison.aggregate import aggregate, format_aggregate
from pytest_infercheck.checks.comparison.buckets import BucketStat, bucket_line, bucket_stats
from pytest_infercheck.checks.comparison.present import aggregate_record, length_charts
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.checks.comparison.terminal import bucket_lines
from pytest_infercheck.records import plain_data
from pytest_infercheck.specs import Thresholds

from .factories import prompt_comparison


def bucketed(pid: str, bucket: str, kl: list[float], same_top: list[bool]) -> PromptComparison:
    record = prompt_comparison(pid, kl, same_top, [0.0] * len(kl), "unchanged")
    return dataclasses.replace(record, bucket=bucket)


RESULTS = [
    bucketed("s0", "0.5x", [0.0, 0.0], [True, True]),
    bucketed("s1", "0.5x", [0.0, 0.2], [True, True]),
    bucketed("l0", "4x", [0.5, 1.5, 1.0], [False, True, False]),
    bucketed("l1", "4x", [2.0], [False]),
    dataclasses.replace(bucketed("x", "", [9.0], [False])),
]


def test_bucket_stats_by_hand() -> None:
    stats = bucket_stats(RESULTS, failed={"l1", "x"})
    # 0.5x: KL pooled (0 + 0 + 0 + 0.2) / 4 = 0.05, max 0.2, no argmax flip.
    # 4x: (0.5 + 1.5 + 1.0 + 2.0) / 4 = 1.25, max 2.0, flips at 3 of 4 positions; l1 failed.
    # "x" has no bucket: left out (its KL 9 and failure count nowhere).
    assert [s.bucket for s in stats] == ["0.5x", "4x"]
    short, long = stats
    assert (short.n_prompts, short.positions, short.top_flips, short.n_failed) == (2, 4, 0, 0)
    assert short.kl_mean == pytest.approx(0.05) and short.kl_max == pytest.approx(0.2)
    assert (long.n_prompts, long.positions, long.top_flips, long.n_failed) == (2, 4, 3, 1)
    assert long.kl_mean == pytest.approx(1.25) and long.kl_max == pytest.approx(2.0)


def test_nan_is_kept_and_no_positions_is_none() -> None:
    stats = bucket_stats(
        [bucketed("a", "1x", [0.1, math.nan], [True, True]), bucketed("b", "2x", [], [])], []
    )
    assert math.isnan(stats[0].kl_mean) and math.isnan(stats[0].kl_max)
    assert stats[1].kl_mean is None and stats[1].positions == 0
    assert (
        bucket_line(stats) == "KL by length: 1x nan (0 flips, 0 failed) | 2x - (0 flips, 0 failed)"
    )


def test_no_buckets_no_statistics() -> None:
    plain = [dataclasses.replace(r, bucket="") for r in RESULTS]
    agg = aggregate(plain, Thresholds())
    assert agg.buckets == []
    assert "KL by length" not in format_aggregate(agg)
    assert "buckets" not in plain_data(agg)  # absent from the JSON when empty


def test_aggregate_line_and_terminal_and_chart() -> None:
    agg = aggregate(RESULTS, Thresholds())
    assert agg.buckets[1] == BucketStat("4x", 2, 0, 0, 4, 1.25, 2.0, 3)
    line = "KL by length: 0.5x 0.05 (0 flips, 0 failed) | 4x 1.25 (3 flips, 0 failed)"
    assert line in format_aggregate(agg).splitlines()
    data = {
        "check": "diff",
        "suite": "context-ladder",
        "levels": [plain_data(agg)],
        "engines": {},
        "tests": [agg.test],
    }
    record = aggregate_record(data)  # read back as the report reads it
    assert record.levels[0].buckets == agg.buckets
    nodeid = "infercheck.yaml::diff(ladder)::context-ladder::aggregate"
    assert bucket_lines([(nodeid, True, data)]) == [
        f"diff(ladder) context-ladder: {agg.test}: {line}"
    ]
    (chart,) = length_charts("diff(ladder)", record.levels)
    assert "KL vs length: diff(ladder)" in chart
    assert ">0.5x<" in chart and ">4x<" in chart
    assert length_charts("x", [dataclasses.replace(agg, buckets=[])]) == []
