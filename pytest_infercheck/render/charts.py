"""Inline SVG charts for the HTML reports: pure functions from numbers to an SVG string.

No JavaScript, no external resources; every label is escaped. Layout: a plot area inside
fixed margins; a value ``v`` on an axis ``[lo, hi]`` maps linearly onto the pixel range
``[a, b]`` as ``a + (v - lo) / (hi - lo) * (b - a)`` (:func:`scale`). The y axis starts at 0
and ends at the largest value shown (1 when every value is 0). Missing values (None, NaN,
infinities) are left out: a line breaks there, a bar is not drawn. Long series are reduced
to at most ``max_points`` points by :func:`downsample_max`, which keeps each bucket's
largest value, so a single KL spike stays visible.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH = 480
HEIGHT = 160
MARGIN_LEFT = 48
MARGIN_RIGHT = 12
MARGIN_TOP = 22
MARGIN_BOTTOM = 30
MAX_POINTS = 160
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf")

Series = tuple[str, Sequence[float | None]]
"""A named sequence of y values; None or NaN leaves a gap."""
Bar = tuple[str, float | None, float | None, float | None]
"""``(label, value, low, high)``: a bar with an optional interval drawn as an error bar."""


def finite(value: float | None) -> bool:
    """True for a real number that is neither NaN nor infinite."""
    return value is not None and math.isfinite(value)


def scale(value: float, lo: float, hi: float, a: float, b: float) -> float:
    """Map ``value`` from ``[lo, hi]`` onto ``[a, b]`` linearly (the middle when lo == hi)."""
    if hi == lo:
        return (a + b) / 2
    return a + (value - lo) / (hi - lo) * (b - a)


def downsample_max(values: Sequence[float | None], max_points: int) -> list[tuple[int, float]]:
    """``(index, value)`` of the finite values, at most ``max_points`` of them: when there are
    more, the indices are cut into ``max_points`` equal buckets and each bucket keeps its
    largest value (at the index where it occurs)."""
    points = [(i, float(v)) for i, v in enumerate(values) if finite(v)]  # type: ignore[arg-type]
    if len(points) <= max_points or max_points <= 0:
        return points
    n = len(values)
    buckets: dict[int, tuple[int, float]] = {}
    for i, v in points:
        b = i * max_points // n
        if b not in buckets or v > buckets[b][1]:
            buckets[b] = (i, v)
    return [buckets[b] for b in sorted(buckets)]


def histogram_counts(
    values: Sequence[float | None], bins: int, log10: bool = False
) -> tuple[list[float], list[int], int]:
    """``(edges, counts, zeros)`` of the finite values in ``bins`` equal-width bins from the
    smallest to the largest value (``len(edges) == bins + 1``; the last bin includes its
    right edge). With ``log10`` the bins are equal in log10(value) and values <= 0 are only
    counted in ``zeros`` (KL is often exactly 0). No values: ``([], [], zeros)``."""
    data = [float(v) for v in values if finite(v)]  # type: ignore[arg-type]
    zeros = 0
    if log10:
        zeros = sum(1 for v in data if v <= 0)
        data = [math.log10(v) for v in data if v > 0]
    if not data:
        return [], [], zeros
    lo, hi = min(data), max(data)
    if hi == lo:
        lo, hi = lo - 0.5, hi + 0.5
    edges = [lo + (hi - lo) * k / bins for k in range(bins + 1)]
    counts = [0] * bins
    for v in data:
        counts[min(int((v - lo) / (hi - lo) * bins), bins - 1)] += 1
    return edges, counts, zeros


def _num(value: float) -> str:
    """Compact tick text: ``0``, ``0.5``, ``1.2e-05``, ``1.5k``."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value / 1000:.3g}k"
    return f"{value:.3g}"


def _px(value: float) -> str:
    return f"{value:.1f}"


class _Canvas:
    """An SVG document under construction with one plot area."""

    def __init__(self, title: str, width: int, height: int, y_label: str = "") -> None:
        self.width, self.height = width, height
        self.left, self.right = MARGIN_LEFT, width - MARGIN_RIGHT
        self.top, self.bottom = MARGIN_TOP, height - MARGIN_BOTTOM
        self.parts = [
            f'<svg xmlns="http://www.w3.org/2000/svg" class="ic-chart" width="{width}" '
            f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
            f'aria-label="{escape(title)}">',
            f"<title>{escape(title)}</title>",
            f'<text x="{self.left}" y="14" class="ic-chart-title">{escape(title)}</text>',
        ]
        if y_label:
            self.text(4, self.top - 4, y_label, "ic-axis-label")

    def text(self, x: float, y: float, text: str, cls: str, anchor: str = "start") -> None:
        self.parts.append(
            f'<text x="{_px(x)}" y="{_px(y)}" class="{cls}" text-anchor="{anchor}">'
            f"{escape(text)}</text>"
        )

    def y_axis(self, y_max: float) -> None:
        for v in (0.0, y_max / 2, y_max):
            y = scale(v, 0.0, y_max, self.bottom, self.top)
            self.parts.append(
                f'<line x1="{self.left}" y1="{_px(y)}" x2="{self.right}" y2="{_px(y)}" '
                'class="ic-grid"/>'
            )
            self.text(self.left - 4, y + 3, _num(v), "ic-tick", "end")
        self.parts.append(
            f'<line x1="{self.left}" y1="{self.top}" x2="{self.left}" y2="{self.bottom}" '
            'class="ic-axis"/>'
        )

    def empty(self) -> str:
        self.text(self.width / 2, self.height / 2, "no data", "ic-empty", "middle")
        return self.finish()

    def finish(self) -> str:
        return "".join([*self.parts, "</svg>"])


def _y_max(values: list[float]) -> float:
    top = max(values, default=0.0)
    return top if top > 0 else 1.0


def line_chart(
    series: Sequence[Series],
    *,
    title: str,
    x_labels: Sequence[str] | None = None,
    x_label: str = "",
    y_label: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
    max_points: int = MAX_POINTS,
    threshold: tuple[str, float] | None = None,
    marks: Sequence[tuple[int, str]] = (),
) -> str:
    """Lines of ``series`` over x = 0..n-1 (n: the longest series), x spanning the plot area's
    width; ``x_labels`` names the positions (a sweep's levels, stress concurrencies), else
    the first and last index are written. Each line is a ``<polyline class="ic-line">``
    (several when a gap breaks it); with up to 40 points each point is also a ``<circle>``.
    ``threshold`` ``(name, y)``: a dashed ``<line class="ic-threshold">`` across the plot
    area at ``y`` (the y axis reaches it), named at its right end. ``marks``: ``(x, text)``,
    a vertical ``<line class="ic-mark">`` at index ``x`` with ``text`` at its top."""
    canvas = _Canvas(title, width, height, y_label)
    reduced = [(name, downsample_max(values, max_points)) for name, values in series]
    everything = [v for _, points in reduced for _, v in points]
    if not everything:
        return canvas.empty()
    n = max(len(values) for _, values in series)
    limit = threshold if threshold is not None and finite(threshold[1]) else None
    y_max = _y_max(everything + ([limit[1]] if limit is not None else []))
    canvas.y_axis(y_max)

    def x_of(i: int) -> float:
        return scale(i, 0, n - 1, canvas.left, canvas.right)

    if limit is not None:
        y = scale(limit[1], 0.0, y_max, canvas.bottom, canvas.top)
        canvas.parts.append(
            f'<line class="ic-threshold" x1="{canvas.left}" y1="{_px(y)}" x2="{canvas.right}" '
            f'y2="{_px(y)}" stroke="#b00" stroke-dasharray="4 3"/>'
        )
        canvas.text(canvas.right - 2, y - 3, f"{limit[0]} {limit[1]:.4g}", "ic-tick", "end")
    for i, text in marks:
        if not 0 <= i < n:
            continue
        x = x_of(i)
        canvas.parts.append(
            f'<line class="ic-mark" x1="{_px(x)}" y1="{canvas.top}" x2="{_px(x)}" '
            f'y2="{canvas.bottom}" stroke="#e08000" stroke-width="1.5"/>'
        )
        canvas.text(x + 3, canvas.top + 9, text, "ic-tick")
    for k, ((name, values), (_, points)) in enumerate(zip(series, reduced, strict=True)):
        color = COLORS[k % len(COLORS)]
        for run in _runs(points, values):
            coords = " ".join(
                f"{_px(x_of(i))},{_px(scale(v, 0.0, y_max, canvas.bottom, canvas.top))}"
                for i, v in run
            )
            canvas.parts.append(
                f'<polyline class="ic-line" data-series="{escape(name)}" points="{coords}" '
                f'stroke="{color}" fill="none"/>'
            )
        if len(points) <= 40:
            for i, v in points:
                y = scale(v, 0.0, y_max, canvas.bottom, canvas.top)
                canvas.parts.append(
                    f'<circle cx="{_px(x_of(i))}" cy="{_px(y)}" r="2.5" fill="{color}">'
                    f"<title>{escape(name)} [{i}]: {v:.4g}</title></circle>"
                )
        if len(series) > 1:
            canvas.text(canvas.right - 4, canvas.top + 12 * (k + 1), name, "ic-legend", "end")
            canvas.parts[-1] = canvas.parts[-1].replace("<text ", f'<text fill="{color}" ', 1)
    labels = list(x_labels) if x_labels is not None else []
    ticks = (
        list(enumerate(labels))
        if labels
        else [(0, "0"), (n - 1, str(n - 1))]
        if n > 1
        else [(0, "0")]
    )
    for i, label in ticks:
        canvas.text(x_of(i), canvas.bottom + 12, label, "ic-tick", "middle")
    if x_label:
        canvas.text(
            (canvas.left + canvas.right) / 2, height - 4, x_label, "ic-axis-label", "middle"
        )
    return canvas.finish()


def _runs(
    points: list[tuple[int, float]], values: Sequence[float | None]
) -> list[list[tuple[int, float]]]:
    """Split ``points`` (indices into ``values``, increasing) where a missing value lies
    between two consecutive points: one list per unbroken stretch of line."""
    runs: list[list[tuple[int, float]]] = []
    previous = None
    for i, v in points:
        if previous is None or not all(finite(x) for x in values[previous + 1 : i]):
            runs.append([])
        runs[-1].append((i, v))
        previous = i
    return runs


def bar_chart(
    bars: Sequence[Bar],
    *,
    title: str,
    y_label: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """One ``<rect class="ic-bar">`` per bar with a finite value, equal slots across the plot
    area (bar width 70% of a slot), and a vertical ``<line class="ic-err">`` from low to
    high where both are finite."""
    canvas = _Canvas(title, width, height, y_label)
    shown = [b for b in bars if finite(b[1])]
    if not shown:
        return canvas.empty()
    tops = [float(v) for _, value, _, high in shown for v in (value, high) if finite(v)]  # type: ignore[arg-type]
    y_max = _y_max(tops)
    canvas.y_axis(y_max)
    slot = (canvas.right - canvas.left) / len(bars)
    for k, (label, value, low, high) in enumerate(bars):
        x0 = canvas.left + k * slot
        center = x0 + slot / 2
        canvas.text(center, canvas.bottom + 12, label, "ic-tick", "middle")
        if not finite(value):
            continue
        assert value is not None
        y = scale(value, 0.0, y_max, canvas.bottom, canvas.top)
        canvas.parts.append(
            f'<rect class="ic-bar" x="{_px(x0 + 0.15 * slot)}" y="{_px(y)}" '
            f'width="{_px(0.7 * slot)}" height="{_px(canvas.bottom - y)}" '
            f'fill="{COLORS[0]}"><title>{escape(label)}: {value:.4g}</title></rect>'
        )
        if finite(low) and finite(high):
            assert low is not None and high is not None
            y_low = scale(low, 0.0, y_max, canvas.bottom, canvas.top)
            y_high = scale(high, 0.0, y_max, canvas.bottom, canvas.top)
            canvas.parts.append(
                f'<line class="ic-err" x1="{_px(center)}" y1="{_px(y_low)}" '
                f'x2="{_px(center)}" y2="{_px(y_high)}"/>'
            )
    return canvas.finish()


def histogram(
    values: Sequence[float | None],
    *,
    title: str,
    bins: int = 20,
    log10: bool = False,
    x_label: str = "",
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Counts of :func:`histogram_counts` as adjacent ``<rect class="ic-bar">``; with
    ``log10`` the x ticks are 10^edge and the values <= 0 are a separate bar labelled 0 at
    the left (drawn only when there are any)."""
    canvas = _Canvas(title, width, height, "count")
    edges, counts, zeros = histogram_counts(values, bins, log10)
    if not counts and not zeros:
        return canvas.empty()
    fmt = (lambda e: _num(10**e)) if log10 else _num
    columns = ([("0", zeros)] if zeros else []) + [
        (f"{fmt(lo)} to {fmt(hi)}", c) for lo, hi, c in zip(edges, edges[1:], counts, strict=False)
    ]
    y_max = _y_max([float(c) for _, c in columns])
    canvas.y_axis(y_max)
    slot = (canvas.right - canvas.left) / len(columns)
    for k, (label, count) in enumerate(columns):
        x0 = canvas.left + k * slot
        y = scale(count, 0.0, y_max, canvas.bottom, canvas.top)
        canvas.parts.append(
            f'<rect class="ic-bar" x="{_px(x0)}" y="{_px(y)}" width="{_px(slot * 0.95)}" '
            f'height="{_px(canvas.bottom - y)}" fill="{COLORS[0]}">'
            f"<title>{escape(label)}: {count}</title></rect>"
        )
    if zeros:
        canvas.text(canvas.left + slot / 2, canvas.bottom + 12, "0", "ic-tick", "middle")
    if edges:
        start = canvas.left + (slot if zeros else 0)
        canvas.text(start, canvas.bottom + 12, fmt(edges[0]), "ic-tick")
        canvas.text(canvas.right, canvas.bottom + 12, fmt(edges[-1]), "ic-tick", "end")
    if x_label:
        canvas.text(
            (canvas.left + canvas.right) / 2, height - 4, x_label, "ic-axis-label", "middle"
        )
    return canvas.finish()
