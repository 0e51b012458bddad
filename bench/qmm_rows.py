"""Per-row cost of mlx's CPU quantized matmul against a bf16 matmul (one process, side by side).

``.venv/bin/python bench/qmm_rows.py``

The shapes are the random tiny llama's output head (hidden 64, vocabulary 259; its MLP
behaves alike) and its 4-bit quantization (affine, group 32, as ``make_models`` makes it).
For M rows at once (a batch, or a teacher-forced sequence) it prints the time per call and
per row: a kernel whose time per row does not fall with M gains nothing from batching, so
its work on a CPU is bounded by rows x cores, whatever the harness does.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import mlx.core as mx

HIDDEN, VOCAB, GROUP, BITS = 64, 259, 32, 4


def seconds_per_call(call: Callable[[], mx.array], reps: int) -> float:
    mx.eval(call())  # warm up
    started = time.perf_counter()
    for _ in range(reps):
        mx.eval(call())
    return (time.perf_counter() - started) / reps


def main() -> None:
    mx.set_default_device(mx.cpu)
    mx.random.seed(0)
    w = mx.random.normal((VOCAB, HIDDEN)).astype(mx.bfloat16)
    wq, scales, biases = mx.quantize(w, group_size=GROUP, bits=BITS)
    print(
        f"x (M, {HIDDEN}) @ W.T, W ({VOCAB}, {HIDDEN}); mlx {getattr(mx, '__version__', '?')}, CPU"
    )
    for rows in (1, 8, 64, 512):
        x = mx.random.normal((rows, HIDDEN)).astype(mx.bfloat16)
        reps = max(20, 4000 // rows)

        def quantized_call(x: mx.array = x) -> mx.array:
            return mx.quantized_matmul(
                x, wq, scales, biases, transpose=True, group_size=GROUP, bits=BITS
            )

        def dense_call(x: mx.array = x) -> mx.array:
            return x @ w.T

        quantized = seconds_per_call(quantized_call, reps)
        dense = seconds_per_call(dense_call, reps)
        per_row = quantized / rows * 1e6
        print(
            f"M={rows:4d}: {BITS}-bit {quantized * 1e6:8.1f} us ({per_row:6.1f} us/row)"
            f"   bf16 {dense * 1e6:8.1f} us ({dense / rows * 1e6:6.1f} us/row)"
            f"   {BITS}-bit / bf16 per row {quantized / dense:5.1f}x"
        )


if __name__ == "__main__":
    main()
