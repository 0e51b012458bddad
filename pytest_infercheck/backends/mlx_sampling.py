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


async def sample_next(backend: Any, prompt: Any, params: GenerationParams, count: int) -> list[int]:
    """``count`` next tokens of ``prompt`` drawn by mlx-lm's own sampler and logits
    processors (``make_sampler``, ``make_logits_processors``) from one forward pass of
    ``generate_step``: the sampler it is given draws ``count`` rows of the step's
    log-probabilities (``(1, V)`` after the processors, broadcast to ``(count, V)``: each
    row is an independent draw of ``categorical_sampling``) and hands ``generate_step`` the
    first. ``params.seed`` seeds ``mx.random`` first, as :meth:`generate_sync` does. The
    method :meth:`~.mlx_lm.MlxLmBackend.sample_next` (the ``NextTokenSampling``
    capability)."""
    import mlx.core as mx

    from .base import BackendError
    from .params import check_taken

    check_taken(backend.name, backend.kind, backend.chat, params)
    if not params.sampled:
        raise BackendError(f"backend {backend.name!r}: sample_next needs temperature > 0")
    ids = backend._prompt_ids(prompt)
    if params.seed is not None:
        mx.random.seed(params.seed)
    sampler = mlx_sampler(params)
    drawn: list[Any] = []

    def many(logprobs: Any) -> Any:
        tokens = sampler(mx.broadcast_to(logprobs, (count, logprobs.shape[-1])))
        drawn.append(tokens)
        return tokens[:1]

    for _ in backend._steps(ids, 0, 1, many, [], mlx_processors(params)):
        break
    if not drawn:
        raise BackendError(f"backend {backend.name!r}: generate_step drew no token")
    return [int(t) for t in np.array(drawn[0]).reshape(-1)]


async def raw_logits(backend: Any, prompt_ids: list[int], continuation_ids: list[int]) -> Any:
    """Float32 raw logits (before any softmax) of one forward pass over ``prompt_ids +
    continuation_ids``, the rows predicting each continuation token: the logits mlx-lm's
    logits processors act on (``generate_step`` calls them on the model's output). The
    method :meth:`~.mlx_lm.MlxLmBackend.raw_logits` (the ``RawLogits`` capability); refused
    with cache options, whose quantized or rotated cache a plain pass would not apply."""
    import mlx.core as mx

    from .base import BackendError

    if backend.options.cache_options() or backend.options.max_kv_size is not None:
        raise BackendError(
            f"backend {backend.name!r}: raw logits are not given under cache options"
        )
    if not prompt_ids or not continuation_ids:
        raise BackendError(f"backend {backend.name!r}: raw logits need a prompt and a token")
    ids = mx.array([*prompt_ids, *continuation_ids])[None]
    start = len(prompt_ids) - 1
    logits = backend._loaded.model(ids)[0, start : start + len(continuation_ids)]
    return np.array(logits.astype(mx.float32))
