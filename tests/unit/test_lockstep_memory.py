"""Memory of the lockstep at a real vocabulary size (V = 151,936, Qwen's): a random-weight
llama of that vocabulary (hidden 64, 2 layers, made in-process), 16 prompts x 12 tokens,
the baseline and two test models stepped together. Nothing of size T x V is kept, so the
extra memory stays under :data:`LIMIT_BYTES` and does not grow with the number of tokens.

Measured here as the peak of mlx's allocator (``mx.get_peak_memory``, model weights
excluded: they exist before) plus the peak of Python's allocations (``tracemalloc``: the
numpy rows and float64 temporaries of the per-position statistics).
"""

from __future__ import annotations

import tracemalloc

import pytest

from pytest_infercheck.backends.mlx_lockstep import Stepper, lockstep

mx = pytest.importorskip("mlx.core")

VOCAB = 151_936
LIMIT_BYTES = 2 * 1024**3


def _model(seed: int) -> Stepper:
    from mlx_lm.models import llama

    args = llama.ModelArgs.from_dict(
        {
            "model_type": "llama",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "rms_norm_eps": 1e-5,
            "vocab_size": VOCAB,
            "tie_word_embeddings": False,
        }
    )
    mx.random.seed(seed)
    model = llama.Model(args)
    model.set_dtype(mx.bfloat16)
    mx.eval(model.parameters())
    return Stepper(model, frozenset(), lambda ids: "")


def _extra_bytes(tokens: int) -> int:
    base, tests = _model(0), [_model(1), _model(2)]
    prompts = [[1 + (7 * j + i) % 1000 for i in range(5 + j % 7)] for j in range(16)]
    mx.clear_cache()
    mx.reset_peak_memory()
    before = mx.get_active_memory()
    tracemalloc.start()
    try:
        result = lockstep(base, tests, prompts, [tokens] * len(prompts))
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert all(len(g.token_ids or []) == tokens for g in result.baseline)
    assert len(result.stats[1][0].kl) == tokens
    return mx.get_peak_memory() - before + python_peak


def test_extra_memory_at_152k_vocabulary_stays_under_2_gb() -> None:
    short, long = _extra_bytes(4), _extra_bytes(12)
    assert long < LIMIT_BYTES, f"{long / 2**20:.0f} MiB"
    # nothing grows with T x V: 8 more positions x 16 sequences x V float32 for three
    # models would be 0.23 GB; allow a tenth of that for the growth of per-position numbers
    assert long - short < 8 * 16 * VOCAB * 4 * 3 / 10, (short, long)
