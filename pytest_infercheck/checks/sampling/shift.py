"""Penalties and ``logit_bias`` in a ``sampling`` item: the reference's row shifted by the
engine's documented formula given the tokens so far (pure).

The tokens so far (``history``) are the prompt's ids and the greedy tokens teacher-forced
before the position: the draws send them all as the prompt (``max_tokens`` 1), so an engine
that counts the output only (vLLM's presence and frequency penalties, the OpenAI formula)
counts none of them, and one that counts a window of prompt and output (llama-server,
mlx-lm) counts its window of them (:mod:`~pytest_infercheck.metrics.sampling.penalties`).

The shifted logits, renormalised (:func:`~pytest_infercheck.metrics.sampling.
penalized_logprobs`), are then truncated and tempered by the engine's order as without
penalties (every engine here applies the penalties and the bias before its truncations and
temperature).

**Raw logits or log-probabilities.** A reference that reports log-probabilities (llama-server
``n_probs``, a score) gives ``log p_i = l_i - C``, ``C = log sum_j exp(l_j)`` the same for
every token of the row. Presence, frequency and bias subtract ``s_i`` from each logit:
``(l_i - C) - s_i`` renormalised is ``softmax(l - s)_i``, the constant cancels, so
log-probabilities stand for the logits. The repetition penalty scales a repeated token's
logit: ``l_i / theta`` (``l_i > 0``) or ``l_i * theta``. On log-probabilities that is
``(l_i - C) / theta = l_i / theta - C / theta`` beside ``l_j - C`` for an unrepeated token:
the constant is no longer common to the row (``C / theta`` vs ``C``), so renormalising does
not remove it; and the sign test reads ``l_i - C``, always negative, not ``l_i``. It needs the
raw logits (mlx-lm in-process gives them); without them the item is unmeasured, saying so.

**Bias.** A bias of :data:`BAN` or less is taken as a ban (OpenAI: -100 "should result in a
ban"; ``exp(-100) < 4e-44`` of the row's top token, below any count): the token leaves the
support, and a draw of it fails at once. A bias of :data:`FORCE` or more whose tokens hold
all but :data:`FORCED_SLACK` of the expected mass forces them: a draw of any other token
fails at once (the G-test pools a one-token support into one cell and cannot see it).

A shifting parameter that changes nothing at the position (vLLM's presence and frequency
penalties, which count the output only, on tokens all sent as the prompt) leaves the item
unmeasured, saying so: a pass would not tell it was applied.

A reference given as a top-k list with its tail pooled is refused under penalties: a
penalised token among the unlisted ones shifts the tail by an unknown amount.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from ...metrics.sampling import Expected, Penalties, penalized_logprobs
from ...metrics.sampling.penalties import PENALTY_ENGINES

PENALTY_PARAMS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "logit_bias")
"""The parameters that shift logits before the truncations."""
BAN = -100.0
FORCE = 100.0
IDLE_ATOL = 1e-12
"""Rows whose probabilities differ by no more than this are one distribution: a parameter
that changes nothing at a position is not tested there (the item is unmeasured, saying so:
an engine that dropped it would pass)."""
FORCED_SLACK = 1e-12
"""The largest expected mass outside the forced tokens under which :data:`FORCE` forces."""


def penalized(params: Mapping[str, Any]) -> list[str]:
    """The shifting parameters written in ``params`` (those that change nothing left out:
    ``repetition_penalty`` 1, a bias of 0)."""
    out = []
    for name in PENALTY_PARAMS:
        value = params.get(name)
        if value is None or (name == "repetition_penalty" and value == 1.0):
            continue
        if name == "logit_bias" and not any(b for b in dict(value).values()):
            continue
        if name != "logit_bias" and name != "repetition_penalty" and value == 0:
            continue
        out.append(name)
    return out


def penalties_of(params: Mapping[str, Any]) -> Penalties:
    """The :class:`Penalties` of a parameter set as written (a bias <= :data:`BAN` as
    ``-inf``)."""
    bias = tuple(
        (int(t), -math.inf if float(b) <= BAN else float(b))
        for t, b in dict(params.get("logit_bias") or {}).items()
    )
    return Penalties(
        presence_penalty=params.get("presence_penalty"),
        frequency_penalty=params.get("frequency_penalty"),
        repetition_penalty=params.get("repetition_penalty"),
        logit_bias=bias,
    )


def shifted_row(
    logprobs: Mapping[int, float],
    logits: Mapping[int, float] | None,
    tail: float,
    params: Mapping[str, Any],
    engine: str,
    history: Sequence[int],
) -> dict[int, float]:
    """The log-probabilities the engine truncates and tempers: ``logprobs`` unchanged
    without shifting parameters, else the engine's shift of ``logits`` (or of ``logprobs``
    where the constant cancels: module docstring) renormalised, banned tokens left out.
    Raises ``ValueError`` saying why it cannot be computed."""
    shifting = penalized(params)
    if not shifting:
        return dict(logprobs)
    if engine not in PENALTY_ENGINES:
        raise ValueError(
            f"no documented semantics of {', '.join(shifting)} for engine {engine!r} "
            f"(known: {', '.join(PENALTY_ENGINES)})"
        )
    if tail > 0:
        raise ValueError(
            f"{', '.join(shifting)} on a top-k reference: a penalised token among the "
            f"unlisted ones ({tail:.3g} of the mass) shifts the tail by an unknown amount "
            "(give the full vocabulary)"
        )
    if "repetition_penalty" in shifting and logits is None:
        raise ValueError(
            "repetition_penalty needs the raw logits (it divides a positive logit and "
            "multiplies a negative one; log-probabilities are the logits minus the row's "
            "log-sum-exp, all negative, and that constant does not cancel) and the "
            "reference gives log-probabilities only"
        )
    source = logits if logits is not None else logprobs
    shifted = _shift(source, params, engine, history)
    for name in shifting:
        if _same(shifted, _shift(source, without(params, name), engine, history)):
            raise ValueError(
                f"{name} changes nothing at this position on {engine}: {_idle(name, engine)}"
            )
    return shifted


def _shift(
    source: Mapping[int, float], params: Mapping[str, Any], engine: str, history: Sequence[int]
) -> dict[int, float]:
    shifted = penalized_logprobs(source, penalties_of(params), engine, prompt=list(history))
    return {t: v for t, v in shifted.items() if not math.isinf(v)}


def _same(a: Mapping[int, float], b: Mapping[int, float]) -> bool:
    """Whether two rows are one distribution (probabilities within :data:`IDLE_ATOL`)."""
    if a.keys() != b.keys():
        return False
    return all(abs(math.exp(a[t]) - math.exp(b[t])) <= IDLE_ATOL for t in a)


def _idle(name: str, engine: str) -> str:
    if engine in ("vllm", "openai") and name in ("presence_penalty", "frequency_penalty"):
        return (
            "it counts the output only, and the check sends the tokens so far as the prompt "
            "(nothing to test: a dropped penalty would draw the same)"
        )
    return "no token it acts on carries probability here (nothing to test)"


def without(params: Mapping[str, Any], name: str) -> dict[str, Any]:
    """``params`` with ``name`` left out (the set an engine that dropped it applies)."""
    return {k: v for k, v in params.items() if k != name}


def bias_finding(
    params: Mapping[str, Any],
    counts: Mapping[int, int],
    expected: Expected,
    name: Any,
) -> str | None:
    """Why the draws break a ban or a forcing bias (module docstring), naming the
    ``logit_bias`` and the tokens (``name(token)`` their text); None when none is broken."""
    bias = {int(t): float(b) for t, b in dict(params.get("logit_bias") or {}).items()}
    n = sum(counts.values())
    found = []
    for token, b in sorted(bias.items()):
        if b <= BAN and counts.get(token, 0):
            found.append(
                f"logit_bias {b:g} on token {name(token)} (a ban): drawn {counts[token]} of {n}"
            )
    forced = {t for t, b in bias.items() if b >= FORCE}
    if forced and sum(expected.probs.get(t, 0.0) for t in forced) >= 1 - FORCED_SLACK:
        others = Counter({t: c for t, c in counts.items() if t not in forced and c})
        if others:
            shown = ", ".join(f"token {name(t)} x{c}" for t, c in others.most_common(3))
            what = " or ".join(f"{name(t)}" for t in sorted(forced))
            found.append(
                f"logit_bias {bias[min(forced)]:+g} forces token {what}: "
                f"{sum(others.values())} of {n} draws were others ({shown})"
            )
    return "; ".join(found) or None
