"""Prompts on which both models generate up to ``max_tokens`` (no early EOS).

A random-weight model emits EOS at random (about once in 259 tokens for the tiny llama),
so some prompts stop early, on one side or both. infer-check 0.2.6 never stops at EOS, the
plugin and the plain loop do: with early stops the three would not do the same work. So
candidates are screened once with greedy ``generate_step`` (what all three run) and the
first ``n`` where neither model stops early are kept. The choice is cached per models
(folder, file sizes and mtimes), ``n`` and ``max_tokens``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from common import CACHE, long_prompts

MAX_CANDIDATES_PER_PROMPT = 40


def _models_key(*dirs: Path) -> str:
    h = hashlib.sha256()
    for d in dirs:
        h.update(str(d.resolve()).encode())
        for f in sorted(d.glob("*")):
            if f.is_file():
                st = f.stat()
                h.update(f"{f.name}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def screened_prompts(base: Path, test: Path, n: int, max_tokens: int) -> tuple[list[str], str]:
    """``n`` prompts and a note saying how they were chosen."""
    cache_file = CACHE / "prompts" / f"{_models_key(base, test)}-{n}x{max_tokens}.json"
    if cache_file.exists():
        data = json.loads(cache_file.read_text())
        return list(data["prompts"]), str(data["note"])

    import mlx.core as mx
    from mlx_lm import load
    from mlx_lm.generate import generate_step
    from plain_loop import prompt_ids

    print(f"screening prompts that run to {max_tokens} tokens on both models ...", flush=True)
    model_a, tok = load(str(base))[:2]
    model_b = load(str(test))[0]
    eos = set(tok.eos_token_ids)

    def length(model: Any, ids: list[int]) -> int:
        count = 0
        for token, _ in generate_step(mx.array(ids), model, max_tokens=max_tokens):
            count += 1
            if int(token) in eos:
                break
        return count

    limit = n * MAX_CANDIDATES_PER_PROMPT
    scored: list[tuple[int, int, str]] = []
    kept: list[str] = []
    for i, text in enumerate(long_prompts(limit)):
        ids = prompt_ids(tok, text)
        shortest = length(model_a, ids)
        if shortest == max_tokens:
            shortest = min(shortest, length(model_b, ids))
        if shortest == max_tokens:
            kept.append(text)
            if len(kept) == n:
                break
        else:
            scored.append((-shortest, i, text))
    if len(kept) == n:
        note = f"screened: {n} of {i + 1} candidates run to {max_tokens} tokens on both models"
    else:  # fall back on the longest ones
        best = sorted(scored)[: n - len(kept)]
        kept += [text for _, _, text in sorted(best, key=lambda s: s[1])]
        note = (
            f"screened: only {len(kept) - len(best)} of {limit} candidates run to {max_tokens} "
            f"tokens on both models; completed with the {len(best)} longest"
        )
    cache_file.parent.mkdir(parents=True, exist_ok=True)
    cache_file.write_text(json.dumps({"prompts": kept, "note": note}, indent=1))
    return kept, note
