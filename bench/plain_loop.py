"""The plain mlx-lm loop: the work of a compare, and nothing else (run as a subprocess).

For each prompt: greedy ``generate_step`` on the baseline then on the test model (stop at
EOS, honour max tokens), then one teacher-forced forward pass per model over prompt +
the baseline's continuation, as float32 log-softmax. The prompt ids are built the way the
plugin's mlx-lm backend builds them (chat template if the tokenizer has one, else the
encoded text with a BOS), so both do exactly the same model work.

Usage: python bench/plain_loop.py DIR_A DIR_B SUITE.jsonl MAX_TOKENS
Prints one JSON object: timings (import, load, work) and token counts.
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import json  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def prompt_ids(tokenizer: Any, text: str) -> list[int]:
    """Same rule as ``MlxLmBackend.render`` (chat: default, thinking off, no system)."""
    if getattr(tokenizer, "has_chat_template", False):
        rendered = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}],
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=False,
        )
        return list(tokenizer.encode(rendered, add_special_tokens=False))
    ids = list(tokenizer.encode(text, add_special_tokens=True))
    bos = tokenizer.bos_token_id
    if bos is not None and (not ids or ids[0] != bos):
        ids.insert(0, bos)
    return ids


def main(argv: list[str]) -> dict[str, Any]:
    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step

    imported = time.perf_counter()
    dir_a, dir_b, suite, max_tokens = Path(argv[0]), Path(argv[1]), Path(argv[2]), int(argv[3])
    model_a, tok_a = load(str(dir_a))[:2]
    model_b = load(str(dir_b))[0]
    texts = [json.loads(line)["text"] for line in suite.read_text().splitlines() if line]
    loaded = time.perf_counter()
    eos = set(tok_a.eos_token_ids)

    def greedy(model: Any, ids: list[int]) -> list[int]:
        tokens: list[int] = []
        for token, _ in generate_step(mx.array(ids), model, max_tokens=max_tokens):
            tokens.append(int(token))
            if tokens[-1] in eos:
                break
        return tokens

    def score(model: Any, ids: list[int], continuation: list[int]) -> None:
        x = mx.array([*ids, *continuation])[None]
        start = len(ids) - 1
        logits = model(x)[0, start : start + len(continuation)].astype(mx.float32)
        mx.eval(logits - mx.logsumexp(logits, axis=-1, keepdims=True))

    generated = [0, 0]
    scored = 0
    gen_s = score_s = 0.0
    for text in texts:
        ids = prompt_ids(tok_a, text)
        t0 = time.perf_counter()
        base = greedy(model_a, ids)
        test = greedy(model_b, ids)
        t1 = time.perf_counter()
        generated[0] += len(base)
        generated[1] += len(test)
        if base:
            score(model_a, ids, base)
            score(model_b, ids, base)
            scored += len(base)
        gen_s += t1 - t0
        score_s += time.perf_counter() - t1
    done = time.perf_counter()
    return {
        "prompts": len(texts),
        "import_s": imported - STARTED,
        "load_s": loaded - imported,
        "work_s": done - loaded,
        "total_s": done - STARTED,
        "generate_s": gen_s,
        "score_s": score_s,
        "tokens_a": generated[0],
        "tokens_b": generated[1],
        "scored_positions": scored,
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
