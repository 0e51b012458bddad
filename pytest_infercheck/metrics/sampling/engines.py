"""Each engine's documented order of temperature, top-k, top-p and min-p.

(Stub: citations filled in below as the sources are read.)
"""

from __future__ import annotations

from collections.abc import Mapping

from .params import Expected, SamplingParams

__all__ = ["ENGINES", "expected_distribution"]

ENGINES = ("mlx-lm", "mlx_lm.server", "llama-server", "vllm", "vllm-mlx", "sglang", "openai")
"""The engine names :func:`expected_distribution` knows."""


def expected_distribution(
    logprobs: Mapping[int, float],
    params: SamplingParams,
    engine: str,
    *,
    tail: float = 0.0,
) -> Expected:
    """The distribution ``engine`` samples from, given the reference's raw
    (temperature-1) log-probabilities ``logprobs`` at the position.

    ``logprobs``: the full vocabulary, or the top-k with ``tail = 1 - sum(exp(logprobs))``
    pooled as one bucket. Raises ``ValueError`` on a non-finite logprob or tail, on unknown
    ``engine``, or when the support cannot be decided from a top-k list (the truncation
    reaches into the tail).
    """
    raise NotImplementedError
