"""The plain *batched* mlx-lm loop: a compare's (or sweep's) work, batched, and nothing else.

Run as a subprocess: ``python bench/plain_batched.py SUITE.jsonl MAX_TOKENS BASE TEST [TEST...]``
(one TEST: a compare; several: a sweep's levels). Prints one JSON object (timings and
token counts).

1. Greedy generation of every prompt on the baseline, then on each test model: one mlx-lm
   ``BatchGenerator`` per model with every prompt inserted at once (prefill and completion
   batch = the number of prompts; stop at EOS, at most MAX_TOKENS per sequence), as
   ``MlxLmBackend.generate_batch_sync`` does.
2. Teacher-forced scoring on prompt + the baseline's continuation, baseline and each test
   model: right-padded batches of sequences, one forward pass per batch (causal attention,
   so the padding after a sequence changes none of its positions). Per position, float32
   log-softmax of both, ``KL(base || test) = sum_v p_base(v) (log p_base(v) - log p_test(v))``
   and whether the argmaxes agree, reduced to per-model sums on the device. A batch holds
   at most :data:`LOGITS_BUDGET` bytes of float32 logits (at V = 152k: a few sequences).

The prompt ids are built as the plugin's mlx-lm backend builds them (``plain_loop.prompt_ids``).
This is the limit for a harness doing the same work with the same batching; the plugin's
lockstep path may do less (it reuses the baseline's generation distributions), which makes
this reference conservative.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

LOGITS_BUDGET = 256 * 1024 * 1024
"""Bytes of float32 logits one scoring batch may hold (batch x length x vocabulary x 4)."""


def score_batches(lengths: list[int], vocab: int, budget: int = LOGITS_BUDGET) -> list[range]:
    """Consecutive index ranges of sequences scored together: each batch's
    ``count * longest * vocab * 4`` bytes stay within ``budget`` (at least one sequence)."""
    out: list[range] = []
    start = 0
    while start < len(lengths):
        end = start + 1
        longest = lengths[start]
        while end < len(lengths):
            longest_next = max(longest, lengths[end])
            if (end + 1 - start) * longest_next * vocab * 4 > budget:
                break
            longest = longest_next
            end += 1
        out.append(range(start, end))
        start = end
    return out


def main(argv: list[str]) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import BatchGenerator
    from plain_loop import prompt_ids

    imported = time.perf_counter()
    suite, max_tokens = Path(argv[0]), int(argv[1])
    dirs = [Path(d) for d in argv[2:]]
    loaded_models = [load(str(d)) for d in dirs]
    models = [m[0] for m in loaded_models]
    tok = loaded_models[0][1]
    texts = [json.loads(line)["text"] for line in suite.read_text().splitlines() if line]
    prompts = [prompt_ids(tok, t) for t in texts]
    loaded = time.perf_counter()
    eos = [[t] for t in tok.eos_token_ids]

    def generate(model: Any) -> list[list[int]]:
        gen = BatchGenerator(
            model,
            max_tokens=max_tokens,
            stop_tokens=eos,
            completion_batch_size=len(prompts),
            prefill_batch_size=len(prompts),
        )
        try:
            uids = gen.insert(prompts)
            tokens: dict[int, list[int]] = {uid: [] for uid in uids}
            while responses := gen.next_generated():
                for r in responses:
                    tokens[r.uid].append(int(r.token))
        finally:
            gen.close()
        return [tokens[uid] for uid in uids]

    t0 = time.perf_counter()
    generated, generate_each = [], []
    for m in models:
        started = time.perf_counter()
        generated.append(generate(m))
        generate_each.append(time.perf_counter() - started)
    t1 = time.perf_counter()

    base_cont = generated[0]
    seqs = [[*p, *c] for p, c in zip(prompts, base_cont, strict=True)]
    vocab = int(models[0](mx.array([[prompts[0][0]]])).shape[-1])
    kl_sums = [mx.array(0.0) for _ in models[1:]]
    same_top = [mx.array(0) for _ in models[1:]]
    scored = 0
    for batch in score_batches([len(s) for s in seqs], vocab):
        rows = [seqs[i] for i in batch]
        longest = max(len(r) for r in rows)
        x = mx.array([r + [0] * (longest - len(r)) for r in rows])
        # positions predicting the continuation: [len(prompt) - 1, len(seq) - 1)
        mask = mx.array(
            [[len(prompts[i]) - 1 <= j < len(seqs[i]) - 1 for j in range(longest)] for i in batch]
        )
        scored += sum(len(base_cont[i]) for i in batch)
        logp = []
        for model in models:
            logits = model(x).astype(mx.float32)
            logp.append(logits - mx.logsumexp(logits, axis=-1, keepdims=True))
        base = logp[0]
        for k, test in enumerate(logp[1:]):
            kl = (mx.exp(base) * (base - test)).sum(axis=-1)
            kl_sums[k] = kl_sums[k] + mx.where(mask, kl, 0.0).sum()
            same = (base.argmax(axis=-1) == test.argmax(axis=-1)) & mask
            same_top[k] = same_top[k] + same.sum()
        mx.eval(kl_sums, same_top)
    done = time.perf_counter()
    return {
        "prompts": len(texts),
        "import_s": imported - STARTED,
        "load_s": loaded - imported,
        "generate_s": t1 - t0,
        "generate_s_each": generate_each,
        "score_s": done - t1,
        "work_s": done - loaded,
        "total_s": done - STARTED,
        "tokens": [sum(len(g) for g in gens) for gens in generated],
        "scored_positions": scored,
        "mean_kl": [float(s) / max(scored, 1) for s in kl_sums],
        "same_top_rate": [int(s) / max(scored, 1) for s in same_top],
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
