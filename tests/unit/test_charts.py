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
