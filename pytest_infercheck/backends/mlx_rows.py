"""mlx-lm's generation rows shared as the teacher-forced rows of its own continuation.

A greedy (or sampled) generation computes, at every step, the float32 log-softmax over the
whole vocabulary that predicts the next token, after the prompt and the tokens chosen
before it: the same conditional distribution that :meth:`~.mlx_lm.MlxLmBackend.score`
computes in one forward pass over prompt + continuation. A comparison whose baseline is
this model keeps those rows instead of running that pass again (the baseline's
full-vocabulary pass, shared), when they are what ``score`` gives:

- the backend generates and scores through mlx-lm's plain cache (no option: ``score``
  with cache options, and the draft model, take other paths);
- no logits processor (logit bias, penalties): ``generate_step``'s rows are the processed
  logits', ``score``'s the model's;
- every floating-point parameter of the model is float32, so its logits are float32 and
  the step's log-softmax is computed in float32 as ``score`` computes it (a bfloat16
  model's step rows are bfloat16 log-softmax cast up, ``score``'s are float32).

The rows of KV-cached stepping and of one full pass are the same arithmetic in another
order of evaluation; on mlx's CPU backend they are bit-identical for the realistic tiny
Qwen2 (float32, 151,936 ids: every row of 8 prompts x 32 tokens, measured, and
``tests/integration/test_vllm_speed.py`` compares the records of both paths); elsewhere
they may differ by float rounding, as the lockstep's statistics may (:mod:`.mlx_lockstep`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .mlx_sampling import mlx_processors

if TYPE_CHECKING:
    import numpy as np

    from .base import Generation, GenerationParams, PromptInput


def rows_are_scores(backend: Any, params: GenerationParams) -> bool:
    """Whether ``backend``'s generation rows under ``params`` are its teacher-forced rows
    (the conditions of the module docstring)."""
    if not backend.options.plain_cache or backend.draft is not None:
        return False
    if mlx_processors(params) is not None:
        return False
    return float32_model(backend._loaded.model)


def float32_model(model: Any) -> bool:
    """Whether every floating-point parameter of ``model`` is float32 (quantized weights
    are integers; their scales are floating point and counted)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    leaves: list[Any] = [pair[1] for pair in tree_flatten(model.parameters())]
    floating = [p.dtype for p in leaves if mx.issubdtype(p.dtype, mx.floating)]
    return bool(floating) and all(d == mx.float32 for d in floating)


def generate_with_rows(
    backend: Any, prompt: PromptInput, params: GenerationParams
) -> tuple[Generation, np.ndarray | None]:
    """``backend``'s generation of ``prompt`` and, when they are its teacher-forced rows of
    the generated tokens after the prompt's ids (:func:`rows_are_scores`), its per-step
    float32 log-softmax rows ``(T, V)``; else None. The generation itself is the one
    :meth:`~.mlx_lm.MlxLmBackend.generate` returns (it keeps no rows)."""
    if not rows_are_scores(backend, params):
        return backend.generate_sync(prompt, params), None
    generation = backend.generate_sync(prompt, params, full_logprobs=True)
    rows, generation.full_logprobs = generation.full_logprobs, None
    return generation, rows
