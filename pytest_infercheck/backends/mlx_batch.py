"""mlx-lm's real batched generation: prompts decoded together by one ``BatchGenerator``."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .base import Generation
from .mlx_sampling import mlx_sampler

if TYPE_CHECKING:
    from .base import GenerationParams
    from .mlx_load import Loaded


def generate_together(
    loaded: Loaded,
    batch: list[list[int]],
    params: GenerationParams,
    *,
    max_kv_size: int | None,
    prefill_step_size: int | None,
) -> list[Generation]:
    """The generations of the (non-empty) prompt ids of ``batch``, in order, every prompt
    inserted into one ``mlx_lm`` ``BatchGenerator`` (prefill and decode batches as large as
    the batch, so all prompts share each forward pass, left-padded to the longest).
    ``params`` is applied as a sampler only (the generator takes no logits processors nor
    top logprobs). Unlike ``batch_generate``, which drops the stop token, ``token_ids``
    include the EOS a generation stopped on and ``chosen_logprobs`` align with them; each
    generation's ``elapsed_s`` is the batch's, ``batched`` its size."""
    import mlx.core as mx
    from mlx_lm.generate import BatchGenerator

    if params.seed is not None:
        mx.random.seed(params.seed)
    engine_defaults: dict[str, Any] = {}  # None: the engine's default kept
    if prefill_step_size is not None:
        engine_defaults["prefill_step_size"] = prefill_step_size
    started = time.perf_counter()
    generator = BatchGenerator(
        loaded.model,
        max_tokens=params.max_tokens,
        stop_tokens=[[t] for t in loaded.tokenizer.eos_token_ids],
        sampler=mlx_sampler(params),
        completion_batch_size=len(batch),
        prefill_batch_size=len(batch),
        max_kv_size=max_kv_size,
        **engine_defaults,
    )
    try:
        uids = generator.insert(batch)
        tokens: dict[int, list[int]] = {uid: [] for uid in uids}
        chosen: dict[int, list[Any]] = {uid: [] for uid in uids}
        finish: dict[int, str] = {}
        while responses := generator.next_generated():
            for r in responses:
                tokens[r.uid].append(int(r.token))
                chosen[r.uid].append(r.logprobs[r.token])
                if r.finish_reason is not None:
                    finish[r.uid] = r.finish_reason
    finally:
        generator.close()
    elapsed = time.perf_counter() - started
    generations = []
    for uid, ids in zip(uids, batch, strict=True):
        reason = finish.get(uid, "length")
        ids_out = tokens[uid]
        text_ids = ids_out[:-1] if reason == "stop" else ids_out
        values = chosen[uid]
        generations.append(
            Generation(
                text=loaded.tokenizer.decode(text_ids),
                token_ids=ids_out,
                finish_reason=reason,
                chosen_logprobs=(
                    np.array(mx.stack(values).astype(mx.float32)).tolist() if values else []
                ),
                elapsed_s=elapsed,
                prompt_tokens=len(ids),
                batched=len(batch),
            )
        )
    return generations
