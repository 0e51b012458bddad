"""mlx-lm's sampling for a :class:`~.base.GenerationParams`: its sampler and logits
processors (``mlx_lm.sample_utils``), and the top logprobs of its full rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .base import GenerationParams


def mlx_sampler(params: GenerationParams) -> Any:
    """mlx-lm's sampler for ``params``: None (greedy, ``generate_step``'s argmax) at
    temperature 0, else ``make_sampler(temp, top_p, min_p, top_k)``, whose chain is top-p,
    then min-p, then top-k on the untempered log-probabilities, then a categorical draw of
    ``logprobs / temp`` (``mlx_lm/sample_utils.py`` 0.32.2)."""
    from mlx_lm.sample_utils import make_sampler

    if not params.sampled:
        return None
    return make_sampler(
        temp=params.temperature,
        top_p=params.top_p if params.top_p is not None else 0.0,
        min_p=params.min_p if params.min_p is not None else 0.0,
        top_k=params.top_k if params.top_k is not None else 0,
    )


def mlx_processors(params: GenerationParams) -> list[Any] | None:
    """mlx-lm's logits processors for ``params`` (``make_logits_processors``: the logit bias
    added, then the repetition, presence and frequency penalties over the last 20 tokens,
    prompt tokens included); None when it asks none."""
    from mlx_lm.sample_utils import make_logits_processors

    if not (
        params.logit_bias
        or params.repetition_penalty is not None
        or params.presence_penalty is not None
        or params.frequency_penalty is not None
    ):
        return None
    return make_logits_processors(
        logit_bias=dict(params.logit_bias) or None,
        repetition_penalty=params.repetition_penalty,
        presence_penalty=params.presence_penalty,
        frequency_penalty=params.frequency_penalty,
    )


def top_rows(full: np.ndarray | None, k: int) -> list[dict[Any, float]]:
    """The top ``k`` of each step's row of ``full`` (T, V), by id, most likely first."""
    if full is None:
        return []
    out: list[dict[Any, float]] = []
    for row in full:
        best = np.argsort(-row, kind="stable")[:k]
        out.append({int(v): float(row[v]) for v in best})
    return out
