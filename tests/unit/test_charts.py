"""The inline SVG charts: well-formed, coordinates as computed by hand, empty and NaN inputs."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from pytest_infercheck.render import charts
from pytest_infercheck.render.charts import (
    bar_chart,
    downsample_max,
    histogram,
    histogram_counts,
    line_chart,
    scale,
)

SVG = "{http://www.w3.org/2000/svg}"

# Plot area of the default 480 x 160 chart: x 48..468, y 130 (value 0) .. 22 (largest value).
LEFT, RIGHT, TOP, BOTTOM = 48, 468, 22, 130


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    return root


def points(line: ET.Element) -> list[tuple[float, float]]:
    return [(float(x), float(y)) for x, y in (p.split(",") for p in line.get("points", "").split())]


def test_layout_constants_match_the_hand_computed_plot_area() -> None:
    assert (charts.MARGIN_LEFT, charts.WIDTH - charts.MARGIN_RIGHT) == (LEFT, RIGHT)
    assert (charts.MARGIN_TOP, charts.HEIGHT - charts.MARGIN_BOTTOM) == (TOP, BOTTOM)


def test_scale_is_linear_and_centres_a_degenerate_range() -> None:
    assert scale(5, 0, 10, 100, 200) == 150
    assert scale(0, 0, 2, 130, 22) == 130
    assert scale(2, 0, 2, 130, 22) == 22
    assert scale(3, 3, 3, 0, 10) == 5


def test_line_chart_coordinates() -> None:
    root = parse(line_chart([("kl", [0.0, 1.0, 2.0])], title="KL"))
    (line,) = root.iter(f"{SVG}polyline")
    # x: 48, 258, 468 (0..2 over 48..468); y: 0 -> 130, 1 -> 76, 2 (the max) -> 22
    assert points(line) == [(48.0, 130.0), (258.0, 76.0), (468.0, 22.0)]
    assert len(list(root.iter(f"{SVG}circle"))) == 3


def test_line_chart_breaks_at_missing_values_and_skips_them() -> None:
    root = parse(line_chart([("s", [1.0, math.nan, 1.0, None, 0.5, 1.0])], title="t"))
    lines = [points(line) for line in root.iter(f"{SVG}polyline")]
    xs = [[x for x, _ in line] for line in lines]
    assert xs == [[48.0], [216.0], [384.0, 468.0]]  # x = 48 + i * 84
    assert lines[2][0][1] == 76.0  # 0.5 of a max of 1


def test_all_zero_series_uses_a_unit_axis() -> None:
    root = parse(line_chart([("s", [0.0, 0.0])], title="t"))
    (line,) = root.iter(f"{SVG}polyline")
    assert points(line) == [(48.0, 130.0), (468.0, 130.0)]


@pytest.mark.parametrize("values", [[], [None], [math.nan, math.inf]])
def test_empty_inputs_say_no_data(values: list[float | None]) -> None:
    for svg in (
        line_chart([("s", values)], title="t"),
        bar_chart([("a", values[0] if values else None, None, None)], title="t"),
        histogram(values, title="t"),
    ):
        root = parse(svg)
        assert "no data" in "".join(root.itertext())
        assert not list(root.iter(f"{SVG}polyline")) and not list(root.iter(f"{SVG}rect"))


def test_downsample_keeps_bucket_maxima() -> None:
    values = [0.0] * 100
    values[37] = 5.0
    reduced = downsample_max(values, 10)
    assert len(reduced) == 10
    assert (37, 5.0) in reduced
    assert downsample_max([1.0, None, 2.0], 10) == [(0, 1.0), (2, 2.0)]


def test_long_series_are_capped() -> None:
    svg = line_chart([("kl", [float(i % 7) for i in range(100_000)])], title="t")
    (line,) = parse(svg).iter(f"{SVG}polyline")
    assert len(points(line)) <= charts.MAX_POINTS
    assert len(svg) < 20_000


def test_bar_chart_bars_and_error_bars() -> None:
    bars = [("a", 0.5, 0.25, 1.0), ("b", None, None, None), ("c", 1.0, None, None)]
    root = parse(bar_chart(bars, title="t"))
    rects = list(root.iter(f"{SVG}rect"))
    assert len(rects) == 2  # b has no value
    # slot = 420 / 3 = 140; bar a at 48 + 21 = 69, width 98; y max = 1 (the high end)
    assert rects[0].get("x") == "69.0" and rects[0].get("width") == "98.0"
    assert rects[0].get("y") == "76.0" and rects[0].get("height") == "54.0"
    (err,) = [e for e in root.iter(f"{SVG}line") if e.get("class") == "ic-err"]
    assert (err.get("x1"), err.get("y1"), err.get("y2")) == ("118.0", "103.0", "22.0")


def test_histogram_counts_by_hand() -> None:
    edges, counts, zeros = histogram_counts([0.0, 1.0, 2.0, 3.0, 4.0, None, math.nan], 4)
    assert edges == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert counts == [1, 1, 1, 2] and zeros == 0
    edges, counts, zeros = histogram_counts([0.0, 0.0, 0.01, 0.1, 1.0], 2, log10=True)
    assert edges == [-2.0, -1.0, 0.0] and counts == [1, 2] and zeros == 2
    assert histogram_counts([7.0, 7.0], 2) == ([6.5, 7.0, 7.5], [0, 2], 0)


def test_histogram_draws_a_zero_bar_first() -> None:
    root = parse(histogram([0.0, 0.0, 0.01, 0.1, 1.0], title="t", bins=2, log10=True))
    heights = [float(r.get("height", "0")) for r in root.iter(f"{SVG}rect")]
    assert heights == [108.0, 54.0, 108.0]  # 2, 1, 2 of a max of 2


def test_labels_are_escaped() -> None:
    svg = line_chart([("<script>alert(1)</script>", [1.0, 2.0])], title="<b>&", x_labels=["<i>"])
    root = parse(svg)
    assert not list(root.iter("script")) and not list(root.iter(f"{SVG}script"))
    assert "<b>&" in "".join(root.itertext())


def test_threshold_line_and_marks_at_hand_computed_places() -> None:
    """Values [0.1, 0.3, 0.2] and a threshold at 0.4: the y axis reaches 0.4, so the line is
    at the top (y 22) and 0.2 halfway (y 76); index 1 of 3 is x = 48 + 420 / 2 = 258."""
    root = parse(
        line_chart(
            [("KL_t", [0.1, 0.3, 0.2])],
            title="t",
            threshold=("max_kl", 0.4),
            marks=[(1, "first divergence (token 1)"), (7, "out of range")],
        )
    )
    lines = {line.get("class"): line for line in root.iter(f"{SVG}line")}
    limit = lines["ic-threshold"]
    assert (limit.get("y1"), limit.get("y2"), limit.get("x1"), limit.get("x2")) == (
        f"{TOP:.1f}",
        f"{TOP:.1f}",
        str(LEFT),
        str(RIGHT),
    )
    (mark,) = [line for line in root.iter(f"{SVG}line") if line.get("class") == "ic-mark"]
    assert mark.get("x1") == mark.get("x2") == "258.0"
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "max_kl 0.4" in texts and "first divergence (token 1)" in texts
    assert "out of range" not in texts
    ticks = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "ic-tick"]
    assert "0.4" in ticks and "0.2" in ticks  # the axis: 0, 0.2, 0.4


def test_the_kl_chart_labels_tokens_marks_the_divergence_and_draws_max_kl() -> None:
    import dataclasses

    from pytest_infercheck.checks.comparison.present import kl_chart
    from tests.unit.factories import prompt_comparison

    record = dataclasses.replace(
        prompt_comparison("a", [0.0, 0.5, 0.25]),
        base_tokens=["4", "<script>alert(1)</script>"],  # the end-of-sequence token left out
        first_divergence=1,
    )
    svg = kl_chart(record, 0.01)
    assert "<script>" not in svg
    root = parse(svg)
    labels = [t.text for t in root.iter(f"{SVG}text") if t.get("class") == "ic-tick"]
    assert labels[-3:] == ["4", "<script>alert(1)</script>", None]  # an empty text element
    texts = [t.text for t in root.iter(f"{SVG}text")]
    assert "max_kl (mean) 0.01" in texts and "first divergence (token 1)" in texts
    plain = parse(kl_chart(dataclasses.replace(record, base_tokens=[]), None))
    assert not [line for line in plain.iter(f"{SVG}line") if line.get("class") == "ic-threshold"]
    ticks = [t.text for t in plain.iter(f"{SVG}text") if t.get("class") == "ic-tick"]
    assert ticks[-2:] == ["0", "2"]  # no tokens: the first and last index
