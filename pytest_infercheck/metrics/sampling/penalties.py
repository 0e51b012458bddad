"""Presence, frequency and repetition penalties and ``logit_bias``, per engine."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Penalties", "penalized_logits", "penalized_logprobs"]


@dataclass(frozen=True)
class Penalties:
    """The penalty parameters (``None``: not applied)."""

    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()


def penalized_logits(
    logits: Mapping[int, float],
    penalties: Penalties,
    engine: str,
    *,
    generated: Sequence[int] = (),
    prompt: Sequence[int] = (),
) -> dict[int, float]:
    """The logits after ``engine`` applies ``penalties`` given the ``prompt`` and the tokens
    ``generated`` so far."""
    raise NotImplementedError


def penalized_logprobs(
    logits: Mapping[int, float],
    penalties: Penalties,
    engine: str,
    *,
    generated: Sequence[int] = (),
    prompt: Sequence[int] = (),
) -> dict[int, float]:
    """:func:`penalized_logits` renormalised to log-probabilities over the given tokens."""
    raise NotImplementedError
