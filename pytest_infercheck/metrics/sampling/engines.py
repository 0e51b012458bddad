"""Each engine's documented order of temperature, top-k, top-p and min-p, and the expected
distribution it implies.

Notation: ``p_i`` the reference's raw (temperature-1) probabilities ranked ``p_(1) >= p_(2)
>= ...``; ``T`` the temperature; a truncation keeps a prefix of that ranking (temperature is
monotone, so no step reorders it); the final distribution is ``q_i = p_i^(1/T) / Z`` over the
kept prefix, ``Z`` its sum. The steps, each applied to the distribution the previous ones left
(renormalised over the survivors):

* ``top_k(k)``: keep the ``k`` most probable.
* ``top_p(P)``: keep token ``i`` iff ``C_i < P``, ``C_i = sum_{j ranked above i} q_j`` (the
  token that crosses ``P`` is kept).
* ``min_p(m)``: keep ``i`` iff ``q_i >= m * q_(1)``; after the temperature that is
  ``p_i >= m^T * p_(1)`` in raw terms, before it ``p_i >= m * p_(1)``.
* ``temperature(T)``: ``q_i proportional to p_i^(1/T)``.

Per engine, read in the versions this project runs:

* ``llama-server`` (llama.cpp of llama-cpp-python 0.3.36): ``common/common.h``
  ``common_params_sampling::samplers`` orders ``penalties, dry, top_n_sigma, top_k, typ_p,
  top_p, min_p, xtc, temperature``; ``common/sampling.cpp`` ``common_sampler_init`` builds
  that chain (after ``logit_bias``) and ends with ``dist``. ``src/llama-sampler.cpp``:
  ``llama_sampler_top_k_impl`` keeps ``k`` (``k <= 0``: off);
  ``llama_sampler_top_p_apply`` softmaxes the current candidates (so top-p is relative to
  the top-k survivors) and keeps through the first ``i`` with ``cumsum >= p``;
  ``llama_sampler_min_p_apply`` keeps ``logit >= max_logit + log(p)``;
  ``llama_sampler_temp_impl`` divides the logits last. Order: **top-k, top-p, min-p,
  temperature**.
* ``mlx-lm`` (0.32.2) and ``mlx_lm.server`` (``mlx_lm/server.py`` ``_make_sampler`` calls the
  same): ``mlx_lm/sample_utils.py`` ``make_sampler`` chains ``apply_top_p``,
  ``apply_min_p``, ``apply_xtc``, ``apply_top_k`` on the temperature-1 logprobs, then
  ``categorical_sampling(logits * (1 / temp))``. ``apply_top_p`` drops the tokens whose
  ``mass_above >= top_p * total_mass``; ``apply_min_p`` drops ``logprob < max + log(min_p)``.
  Order: **top-p, min-p, top-k, temperature**; top-p is on the full distribution, not on the
  top-k survivors as in llama.cpp (``top_k 2, top_p .5`` on ``.4, .3, ...``: llama.cpp keeps
  one token, mlx-lm two).
* ``vllm-mlx`` (0.6.0, simple engine ``vllm_mlx/engine/simple.py``): ``make_sampler(temp,
  top_p, top_k, min_p)`` of the mlx-lm it pins (0.31.3: same order; its ``apply_top_p`` keeps
  ``cumsum_ascending > 1 - top_p``, the same rule). Its continuous-batching scheduler
  (``vllm_mlx/scheduler.py`` ``_create_batch_generator``) passes ``temp, top_p, min_p`` only:
  ``top_k`` is dropped there (and of the penalties only ``repetition_penalty`` is applied).
* ``vllm`` (0.32.0, CPU build): ``vllm/v1/sample/sampler.py`` ``Sampler.sample``:
  ``apply_temperature`` (``logits / T``), then the argmax-invariant logits processors
  (``MinPLogitsProcessor`` in ``v1/sample/logits_processor/builtin.py``: drops ``softmax <
  min_p * max softmax`` of the *temperature-scaled* logits), then
  ``v1/sample/ops/topk_topp_sampler.py`` ``apply_top_k_top_p_pytorch``: top-k, then top-p on
  the softmax of the top-k survivors (drops ``ascending cumsum <= 1 - p``). Order:
  **temperature, min-p, top-k, top-p**.
* ``openai`` (any OpenAI-compatible server, the order undocumented): the distribution when
  the three orders above agree on it (temperature alone, or a truncation at temperature 1
  that the orders treat alike); otherwise ``ValueError`` asking for the engine. SGLang is not
  modelled here (its torch fallback and flashinfer paths differ on renormalisation).

A reference given as a top-k list with the remaining ``tail`` mass pooled: the tail tokens
each have ``p <= p_(last listed)``. A truncation whose cut falls inside the tail (top-k larger
than the list, top-p not reached by the list, min-p passed by the last listed token) cannot be
decided: ``ValueError``. After a temperature the tail's mass is known only within bounds
(``T < 1``: ``0 <= sum p_j^(1/T) <= tail * p_last^(1/T - 1)``; ``T > 1``: no upper bound
without the vocabulary size); the midpoint is used when the half-width is at most
:data:`TAIL_ATOL` of the total, else ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .params import BOUNDARY_RTOL, Expected, SamplingParams, finite_map

__all__ = ["ENGINES", "NORM_ATOL", "ORDERS", "TAIL_ATOL", "expected_distribution"]

TAIL_ATOL = 1e-3
"""The largest uncertainty, as a share of the total, accepted on the tail's transformed mass."""

NORM_ATOL = 1e-2
"""The largest ``|sum(exp(logprobs)) + tail - 1|`` accepted (the rest is renormalised)."""

ORDERS: dict[str, tuple[str, ...]] = {
    "llama-server": ("top_k", "top_p", "min_p", "temperature"),
    "mlx-lm": ("top_p", "min_p", "top_k", "temperature"),
    "mlx_lm.server": ("top_p", "min_p", "top_k", "temperature"),
    "vllm-mlx": ("top_p", "min_p", "top_k", "temperature"),
    "vllm": ("temperature", "min_p", "top_k", "top_p"),
}
"""Each modelled engine's order of the steps (see the module docstring for the sources)."""

ENGINES = (*ORDERS, "openai")
"""The engine names :func:`expected_distribution` knows."""


@dataclass
class _State:
    """The ranked reference and what the steps so far left of it."""

    ids: NDArray[np.int64]
    p: NDArray[np.float64]
    tail: float
    kept: int
    tail_in: bool
    power: float = 1.0
    boundary: set[int] | None = None

    def weights(self) -> NDArray[np.float64]:
        return np.power(self.p[: self.kept], self.power)

    def tail_weight(self) -> tuple[float, float]:
        """The tail's transformed weight: (midpoint, half-width)."""
        if not self.tail_in or self.tail <= 0:
            return 0.0, 0.0
        if self.power == 1.0:
            return self.tail, 0.0
        last = float(self.p[-1]) if self.p.size else 1.0
        bound = self.tail * last ** (self.power - 1.0)
        if self.power > 1.0:
            return bound / 2, bound / 2
        return bound, math.inf

    def total(self, what: str) -> float:
        mid, half = self.tail_weight()
        z = float(self.weights().sum()) + mid
        if half > TAIL_ATOL * z:
            raise ValueError(
                f"{what}: the pooled tail's mass after temperature is undetermined "
                f"(within +-{half / z:.3g} of the total); give the full vocabulary"
            )
        return z

    def mark(self, tokens: NDArray[np.int64]) -> None:
        assert self.boundary is not None
        self.boundary.update(int(t) for t in tokens)

    def cut(self, new: int) -> None:
        """Keep the first ``new`` of the kept tokens; mark the ties across the cut."""
        if new >= self.kept:
            return
        p = self.p[: self.kept]
        last_in, first_out = p[new - 1], p[new]
        rtol = BOUNDARY_RTOL
        out_tied = np.abs(p[new:] - last_in) <= rtol * last_in
        in_tied = np.abs(p[:new] - first_out) <= rtol * first_out
        self.mark(self.ids[new : self.kept][out_tied])
        self.mark(self.ids[:new][in_tied])
        self.kept = new
        self.tail_in = False

    def undecidable(self, what: str) -> ValueError:
        return ValueError(
            f"{what} cuts inside the pooled tail ({self.tail:.3g} of the mass the "
            f"reference did not list): ask more logprobs or the full vocabulary"
        )


def _top_k(s: _State, k: int) -> None:
    if k < s.kept:
        s.cut(k)
    elif s.tail_in and s.tail > 0:
        raise s.undecidable(f"top_k={k}")


def _top_p(s: _State, top_p: float) -> None:
    w = s.weights()
    z = s.total(f"top_p={top_p}")
    above = (np.cumsum(w) - w) / z  # C_i
    near = np.abs(above - top_p) <= BOUNDARY_RTOL * top_p
    s.mark(s.ids[: s.kept][near])
    keep = int(np.count_nonzero(above < top_p))
    if keep < s.kept:
        s.cut(max(keep, 1))
    elif s.tail_in and s.tail > 0 and float(w.sum()) / z < top_p:
        raise s.undecidable(f"top_p={top_p}")
    else:
        s.tail_in = False if float(w.sum()) / z >= top_p else s.tail_in


def _min_p(s: _State, min_p: float) -> None:
    w = s.weights()
    threshold = min_p * float(w[0])
    near = np.abs(w - threshold) <= BOUNDARY_RTOL * threshold
    s.mark(s.ids[: s.kept][near])
    keep = int(np.count_nonzero(w >= threshold))
    if keep < s.kept:
        s.cut(max(keep, 1))
    elif s.tail_in and s.tail > 0:
        raise s.undecidable(f"min_p={min_p}")


def _ranked(logprobs: Mapping[int, float], tail: float) -> _State:
    lp = finite_map(logprobs, "logprob")
    if not lp:
        raise ValueError("no logprobs given")
    if not (math.isfinite(tail) and 0 <= tail < 1):
        raise ValueError(f"tail must be finite and in [0, 1), got {tail!r}")
    order = sorted(lp, key=lambda t: (-lp[t], t))
    ids = np.array(order, dtype=np.int64)
    p = np.exp(np.array([lp[t] for t in order], dtype=np.float64))
    total = float(p.sum()) + tail
    if abs(total - 1.0) > NORM_ATOL:
        raise ValueError(
            f"probabilities sum to {total:.6g} with the tail, not 1 (tolerance {NORM_ATOL})"
        )
    return _State(ids, p / total, tail / total, int(p.size), tail > 0, boundary=set())


def _apply(
    logprobs: Mapping[int, float], params: SamplingParams, order: tuple[str, ...], tail: float
) -> Expected:
    s = _ranked(logprobs, tail)
    steps: dict[str, Callable[[], None]] = {}
    if params.k is not None:
        steps["top_k"] = lambda: _top_k(s, int(params.k or 0))
    if params.p is not None:
        steps["top_p"] = lambda: _top_p(s, float(params.p or 1.0))
    if params.m is not None:
        steps["min_p"] = lambda: _min_p(s, float(params.m or 0.0))

    def temperature() -> None:
        s.power = 1.0 / params.temperature

    steps["temperature"] = temperature
    for name in order:
        if name in steps:
            steps[name]()
    z = s.total(f"temperature={params.temperature}")
    w = s.weights()
    tail_mid = s.tail_weight()[0]
    probs = {int(t): float(v / z) for t, v in zip(s.ids[: s.kept], w, strict=True) if v > 0}
    boundary = frozenset(s.boundary or ())
    excluded = frozenset(int(t) for t in s.ids[s.kept :]) - boundary
    return Expected(probs, boundary, tail_mid / z, excluded)


def _same(a: Expected, b: Expected) -> bool:
    if a.probs.keys() != b.probs.keys() or a.boundary != b.boundary:
        return False
    close = all(math.isclose(a.probs[t], b.probs[t], rel_tol=1e-9) for t in a.probs)
    return close and math.isclose(a.tail, b.tail, rel_tol=1e-9, abs_tol=1e-12)


def expected_distribution(
    logprobs: Mapping[int, float],
    params: SamplingParams,
    engine: str,
    *,
    tail: float = 0.0,
) -> Expected:
    """The distribution ``engine`` samples from, given the reference's raw
    (temperature-1) log-probabilities ``logprobs`` at the position, by the engine's order
    of the steps (:data:`ORDERS`, module docstring).

    ``logprobs``: the full vocabulary, or the top-k with ``tail = 1 - sum(exp(logprobs))``
    pooled as one bucket. The probabilities are renormalised to sum to 1 with the tail
    (a gap over :data:`NORM_ATOL` is an error). Raises ``ValueError`` on a non-finite logprob
    or tail, an unknown ``engine``, a support a top-k list cannot decide (see the module
    docstring), and for ``openai`` when the engines' orders disagree on the result.
    """
    if engine in ORDERS:
        return _apply(logprobs, params, ORDERS[engine], tail)
    if engine == "openai":
        results = {name: _apply(logprobs, params, order, tail) for name, order in ORDERS.items()}
        first = next(iter(results.values()))
        differ = [name for name, e in results.items() if not _same(first, e)]
        if differ:
            raise ValueError(
                f"the order of temperature and truncations is undocumented for an "
                f"OpenAI-compatible server and changes this distribution ({params}): name "
                f"the engine (one of {', '.join(ORDERS)})"
            )
        return first
    raise ValueError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
