"""mlx-lm in-process applies the request parameters by its own sampler and logits processors
(real mlx on the tiny adder; no mocks): the bias bans and forces tokens, the penalties shift
the logprobs by their formulas, the seed replays a sample, top logprobs come from its rows,
and what it cannot apply is refused."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import BackendError
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec


def backend(path: Path) -> MlxLmBackend:
    return MlxLmBackend(path.name, MlxModelSpec(str(path), dtype="float32"))


def test_logit_bias_bans_and_forces(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    rendered = b.render_sync("12+34=", None, thinking=False)
    greedy = b.generate_sync(rendered, GenerationParams(1, logprobs=3))
    first = greedy.token_ids[0]  # type: ignore[index]
    assert greedy.top_logprobs is not None and next(iter(greedy.top_logprobs[0])) == first
    banned = b.generate_sync(rendered, GenerationParams(1, logit_bias=((first, -100.0),)))
    assert banned.token_ids is not None and banned.token_ids[0] != first
    forced = b.generate_sync(rendered, GenerationParams(1, logit_bias=((5, 100.0),)))
    assert forced.token_ids == [5]


def test_presence_penalty_shifts_the_logprobs_of_seen_tokens(tiny_models: dict[str, Path]) -> None:
    """mlx-lm subtracts ``presence_penalty`` from the logit of each token among the last 20
    (prompt included): the row after the penalty is log_softmax(logits - 1.5 * seen)."""
    b = backend(tiny_models["bf16"])
    rendered = b.render_sync("11+11=", None, thinking=False)
    ids = list(rendered.token_ids or ())
    raw = b.generate_sync(rendered, GenerationParams(1), full_logprobs=True).full_logprobs
    params = GenerationParams(1, presence_penalty=1.5)
    shifted = b.generate_sync(rendered, params, full_logprobs=True).full_logprobs
    assert raw is not None and shifted is not None
    logits = raw[0].astype(np.float64)
    logits[sorted(set(ids[-20:]))] -= 1.5
    expected = logits - np.logaddexp.reduce(logits)
    assert np.max(np.abs(shifted[0] - expected)) < 1e-5


def test_a_seed_replays_a_sample_and_refused_parameters(tiny_models: dict[str, Path]) -> None:
    b = backend(tiny_models["bf16"])
    rendered = b.render_sync("1+", None, thinking=False)
    params = GenerationParams(6, temperature=1.5, seed=11)
    runs = [b.generate_sync(rendered, params).token_ids for _ in range(2)]
    assert runs[0] == runs[1]
    others = {
        tuple(b.generate_sync(rendered, GenerationParams(6, 1.5, s)).token_ids or ())
        for s in range(8)
    }
    assert len(others) > 1  # the seed changes the sample
    for refused in ({"stop": ("x",)}, {"n": 2}, {"min_tokens": 1}, {"ignore_eos": True}):
        with pytest.raises(BackendError, match="does not take"):
            b.generate_sync(rendered, GenerationParams(4, 1.0, **refused))  # type: ignore[arg-type]
