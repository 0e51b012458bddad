"""Part 3: peak extra memory and time of ``metrics.kl.position_stats`` on big (T, V) inputs.

The inputs are float32 log-softmax rows (random normal logits, normalised chunk by chunk so
that making them costs no more than the inputs themselves); the test side is the baseline
plus a little noise, renormalised. Memory is measured with tracemalloc, which traces
numpy's allocations: tracing starts after the inputs exist, so the peak is the extra memory
of the computation alone. Time is measured in a separate run without tracing.

For contrast, the naive computation casts both whole arrays to float64 and works on them:
``exp(log_b) * (log_b - log_t)`` needs four (T, V) float64 arrays at once (two casts, the
difference, the product). It is run for real only when it needs less than ``naive_limit``
bytes; otherwise its cost is given by that formula.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from pytest_infercheck.metrics.kl import position_stats

ROWS_PER_CHUNK = 64
T = TypeVar("T")


@dataclass
class KlResult:
    positions: int
    vocab: int
    input_bytes: int
    peak_extra: int
    seconds: float
    naive_bytes: int
    naive_measured: bool
    max_abs_diff_vs_naive: float | None


def _normalise(chunk: NDArray[np.float32]) -> None:
    """In place: ``chunk - logsumexp(chunk)`` per row (float32)."""
    top = chunk.max(axis=1, keepdims=True)
    lse = top + np.log(np.exp(chunk - top).sum(axis=1, keepdims=True))
    chunk -= lse


def make_inputs(
    positions: int, vocab: int, seed: int = 0
) -> tuple[NDArray[np.float32], NDArray[np.float32], NDArray[np.int64]]:
    rng = np.random.default_rng(seed)
    base = np.empty((positions, vocab), dtype=np.float32)
    test = np.empty((positions, vocab), dtype=np.float32)
    for start in range(0, positions, ROWS_PER_CHUNK):
        b = base[start : start + ROWS_PER_CHUNK]
        t = test[start : start + ROWS_PER_CHUNK]
        rng.standard_normal(dtype=np.float32, out=b)
        b *= 4.0  # peaky, like a real model
        rng.standard_normal(dtype=np.float32, out=t)
        t *= 0.1
        t += b
        _normalise(b)
        _normalise(t)
    chosen = np.argmax(base, axis=1)
    return base, test, chosen


def naive_kl(base: NDArray[np.float32], test: NDArray[np.float32]) -> NDArray[np.float64]:
    log_b = base.astype(np.float64)
    log_t = test.astype(np.float64)
    out: NDArray[np.float64] = (np.exp(log_b) * (log_b - log_t)).sum(axis=1)
    return out


def _traced_peak(fn: Callable[[], T]) -> tuple[int, T]:
    gc.collect()
    tracemalloc.start()
    tracemalloc.reset_peak()
    try:
        value = fn()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak, value


def measure(positions: int, vocab: int, naive_limit: int = 2 * 1024**3) -> KlResult:
    base, test, chosen = make_inputs(positions, vocab)
    input_bytes = base.nbytes + test.nbytes

    started = time.perf_counter()
    stats = position_stats(base, test, chosen)
    seconds = time.perf_counter() - started
    del stats

    peak, _ = _traced_peak(lambda: position_stats(base, test, chosen))

    naive_bytes = 4 * positions * vocab * 8
    measured = naive_bytes <= naive_limit
    diff: float | None = None
    if measured:
        naive_peak, naive = _traced_peak(lambda: naive_kl(base, test))
        naive_bytes = naive_peak
        diff = float(np.max(np.abs(naive - position_stats(base, test, chosen).kl)))
    return KlResult(
        positions=positions,
        vocab=vocab,
        input_bytes=input_bytes,
        peak_extra=peak,
        seconds=seconds,
        naive_bytes=naive_bytes,
        naive_measured=measured,
        max_abs_diff_vs_naive=diff,
    )
