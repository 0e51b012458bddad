"""The speed benchmark's pure helpers (``bench/stats.py``, ``bench/plain_batched.py``'s
batch split), against values worked out by hand. ``bench`` is not a package: its modules
are loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


stats = _load("stats")
plain_batched = _load("plain_batched")


def test_each_tool_takes_each_position_once_over_as_many_rounds_as_tools() -> None:
    order = stats.alternating_order(["a", "b", "c"], 4)
    assert order == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    assert stats.alternating_order(["x"], 2) == [["x"], ["x"]]
    with pytest.raises(ValueError):
        stats.alternating_order(["a"], 0)


def test_median_odd_and_even_counts() -> None:
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    with pytest.raises(ValueError):
        stats.median([])


def test_the_ratio_is_the_median_of_paired_ratios_not_the_ratio_of_medians() -> None:
    # rounds: 1/2 = 0.5, 4/2 = 2.0, 3/4 = 0.75 -> median 0.75;
    # the ratio of medians would be median(1, 4, 3) / median(2, 2, 4) = 3 / 2 = 1.5
    assert stats.median_ratio([1.0, 4.0, 3.0], [2.0, 2.0, 4.0]) == 0.75
    with pytest.raises(ValueError, match="not paired"):
        stats.median_ratio([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="zero"):
        stats.median_ratio([1.0], [0.0])


def test_summary_takes_medians_of_times_and_the_largest_peak_memory() -> None:
    samples = [
        stats.Sample(3.0, 2.0, 100),
        stats.Sample(1.0, 5.0, 300),
        stats.Sample(2.0, 1.0, 200),
    ]
    s = stats.summarize("t", samples)
    assert (s.wall_s, s.cpu_s, s.peak_rss, s.walls) == (2.0, 2.0, 300, (3.0, 1.0, 2.0))


def test_ratios_to_a_reference_tool() -> None:
    runs = {
        "ref": [stats.Sample(2.0, 0, 0), stats.Sample(4.0, 0, 0), stats.Sample(1.0, 0, 0)],
        "fast": [stats.Sample(1.0, 0, 0), stats.Sample(1.0, 0, 0), stats.Sample(1.0, 0, 0)],
    }
    # fast: 1/2, 1/4, 1/1 -> median 0.5
    assert stats.ratios_to(runs, "ref") == {"ref": 1.0, "fast": 0.5}


def test_scoring_batches_keep_logits_within_the_budget() -> None:
    # vocab 10, budget 400 bytes = 100 float32 logits: count * longest * 10 <= 100
    batches = plain_batched.score_batches([5, 5, 3, 8, 2, 20], vocab=10, budget=400)
    # [5, 5]: 2 * 5 * 10 = 100 ok, + 3 -> 3 * 5 * 10 = 150 no; [3]: + 8 -> 2 * 8 * 10 = 160
    # no; [8]: + 2 -> 160 no; [2]: + 20 -> 400 no; [20] alone (over budget, but one
    # sequence always goes)
    assert [list(b) for b in batches] == [[0, 1], [2], [3], [4], [5]]
    assert [list(b) for b in plain_batched.score_batches([4, 4, 4], 1, 1 << 20)] == [[0, 1, 2]]
    assert plain_batched.score_batches([], 10) == []


def test_tool_output_is_escaped_before_it_is_printed() -> None:
    common = _load("common")
    assert common.escaped("5 passed in 1.2s") == "5 passed in 1.2s"
    assert common.escaped("a\x1b[2Jb\né") == "a\\x1b[2Jb\\n\\xe9"
    assert common.escaped("\u202e") == "\\u202e"
