"""Presence, frequency and repetition penalties and ``logit_bias``, per engine.

Notation: ``l_i`` the raw logit of token ``i``; ``b_i`` its ``logit_bias`` (0 if none);
``c_i`` how many times it occurs in the window of past tokens a penalty looks at;
``theta`` the repetition penalty, ``alpha_f`` the frequency and ``alpha_p`` the presence
penalty. Two formulas:

* OpenAI (presence/frequency, https://platform.openai.com/docs/guides/text-generation,
  "parameter details"): ``l_i - c_i * alpha_f - [c_i > 0] * alpha_p``.
* HF/CTRL repetition (Keskar et al. 2019, transformers
  ``RepetitionPenaltyLogitsProcessor``): for ``c_i > 0``, ``l_i / theta`` if ``l_i > 0`` else
  ``l_i * theta`` (the sign test matters: the penalty needs the raw logits, not
  log-probabilities, which are all <= 0).

Per engine (order of application, and which past tokens count):

* ``vllm`` (0.32.0): ``v1/sample/sampler.py`` ``apply_logits_processors``: ``logit_bias``
  (``LogitBiasLogitsProcessor``, added), then ``model_executor/layers/utils.py``
  ``apply_penalties``: repetition over the prompt and the output (``prompt_mask |
  output_mask``; ``_custom_ops.apply_repetition_penalties_torch``: ``logits > 0`` divided),
  then ``- alpha_f * c_i - alpha_p * [c_i > 0]`` with ``c_i`` counted in the output only.
* ``llama-server`` (llama.cpp of llama-cpp-python 0.3.36): ``common/sampling.cpp``: the
  ``logit_bias`` sampler precedes the chain, whose first step is ``penalties``
  (``src/llama-sampler.cpp`` ``llama_sampler_penalties_apply``): for a token in the last
  ``repeat_last_n`` (default 64) accepted tokens, ``l <= 0 ? l * theta : l / theta``, then
  ``- c_i * alpha_f - [c_i > 0] * alpha_p``; the server accepts the prompt's tokens too
  (``tools/server/server-context.cpp``, ``common_sampler_accept(..., false)`` per prompt
  token), so ``c_i`` counts prompt and output in the window.
* ``mlx-lm`` (0.32.2) and ``mlx_lm.server``: ``mlx_lm/sample_utils.py``
  ``make_logits_processors``: ``logit_bias`` added, then repetition (``< 0`` multiplied,
  else divided), presence (``logits[:, tokens] -= penalty``: once per distinct token),
  frequency (``logits.at[:, tokens].subtract(penalty)``: once per occurrence), each over the
  last ``context_size`` (default 20) of prompt and output tokens (``generate.py``
  ``generate_step`` passes both).
* ``vllm-mlx`` (0.6.0, simple engine): ``make_logits_processors(repetition_penalty,
  presence_penalty)`` of mlx-lm after the ``logit_bias`` processor; frequency penalty not
  taken (``ValueError`` here). Its continuous-batching scheduler applies
  ``repetition_penalty`` only (``vllm_mlx/scheduler.py``): not modelled. Measured on 0.6.0
  (``tests/integration/test_sampling_vllm_mlx.py``): the penalties see the last prompt token
  and the output only (its mlx-lm 0.31.3 ``generate_step`` prefills the rest of the prompt
  without handing it to the logits processors; 0.32.2 hands it over), so its items fail
  where the prompt's earlier tokens matter: the engine departs from mlx-lm's documented
  window, and the check says so rather than model the departure.
* ``openai``: the OpenAI formula with ``c_i`` counted in the output; repetition as
  HF/CTRL over prompt and output (transformers applies it to ``input_ids``).

At ``c_i = 0`` nothing but the bias applies; a window of 0 disables the penalties.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from .params import finite_map

__all__ = ["PENALTY_ENGINES", "WINDOWS", "Penalties", "penalized_logits", "penalized_logprobs"]

WINDOWS: dict[str, int | None] = {
    "vllm": None,
    "llama-server": 64,
    "mlx-lm": 20,
    "mlx_lm.server": 20,
    "vllm-mlx": 20,
    "openai": None,
}
"""Each engine's default window of past tokens (None: all)."""

PENALTY_ENGINES = tuple(WINDOWS)


@dataclass(frozen=True)
class Penalties:
    """The penalty parameters (``None``: not applied); ``logit_bias``: ``(token, bias)``."""

    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        for name in ("presence_penalty", "frequency_penalty", "repetition_penalty"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} is not finite ({value!r})")
        if self.repetition_penalty is not None and self.repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0 ({self.repetition_penalty!r})")
        for token, bias in self.logit_bias:
            if math.isnan(bias) or bias == math.inf:
                raise ValueError(
                    f"logit_bias of token {token} is {bias!r} (-inf bans; NaN, +inf are not biases)"
                )


def _window(tokens: Sequence[int], size: int | None) -> list[int]:
    if size is None:
        return list(tokens)
    return list(tokens)[-size:] if size > 0 else []


def _repetition(logit: float, theta: float) -> float:
    """HF/CTRL: divide a positive logit, multiply the others (0 stays 0 either way, so the
    engines' ``> 0`` / ``>= 0`` tests agree)."""
    return logit / theta if logit > 0 else logit * theta


def penalized_logits(
    logits: Mapping[int, float],
    penalties: Penalties,
    engine: str,
    *,
    generated: Sequence[int] = (),
    prompt: Sequence[int] = (),
    window: int | None = -1,
) -> dict[int, float]:
    """The logits after ``engine`` applies ``penalties`` given the ``prompt`` and the tokens
    ``generated`` so far, by the engine's formulas and order (module docstring).

    ``logits``: raw logits of the tokens of interest (a subset of the vocabulary is fine:
    every formula acts per token). ``window``: the engine's window of past tokens
    (``-1``: its default, :data:`WINDOWS`; ``None``: all). A bias of ``-inf`` gives
    ``-inf``. Raises ``ValueError`` on a non-finite logit or an unknown engine."""
    if engine not in WINDOWS:
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(WINDOWS)})")
    if engine == "vllm-mlx" and penalties.frequency_penalty:
        raise ValueError("vllm-mlx does not apply frequency_penalty")
    values = finite_map(logits, "logit")
    size = WINDOWS[engine] if window == -1 else window
    bias = dict(penalties.logit_bias)
    for token in values:
        values[token] += bias.get(token, 0.0)
    theta = penalties.repetition_penalty
    alpha_f = penalties.frequency_penalty or 0.0
    alpha_p = penalties.presence_penalty or 0.0
    history = [*prompt, *generated]
    if engine == "vllm" or engine == "openai":
        repeated = set(history)
        counts = Counter(generated)
    else:
        recent = _window(history, size)
        repeated = set(recent)
        counts = Counter(recent)
    for token, logit in values.items():
        if math.isinf(logit):
            continue
        if theta is not None and theta != 1.0 and token in repeated:
            logit = _repetition(logit, theta)
        c = counts.get(token, 0)
        logit -= c * alpha_f + (alpha_p if c > 0 else 0.0)
        values[token] = logit
    return values


def penalized_logprobs(
    logits: Mapping[int, float],
    penalties: Penalties,
    engine: str,
    *,
    generated: Sequence[int] = (),
    prompt: Sequence[int] = (),
    window: int | None = -1,
) -> dict[int, float]:
    """:func:`penalized_logits` renormalised to log-probabilities over the given tokens:
    ``l'_i - log sum_j exp(l'_j)`` (the full vocabulary gives the engine's distribution; a
    subset, the distribution conditional on it). Presence, frequency and bias shift logits
    additively, so log-probabilities may stand for the logits there; the repetition penalty
    needs the raw logits."""
    values = penalized_logits(
        logits, penalties, engine, generated=generated, prompt=prompt, window=window
    )
    finite = [v for v in values.values() if not math.isinf(v)]
    if not finite:
        raise ValueError("every token is banned (-inf) after the penalties")
    top = max(finite)
    z = top + math.log(sum(math.exp(v - top) for v in finite))
    return {t: (v - z if not math.isinf(v) else -math.inf) for t, v in values.items()}
