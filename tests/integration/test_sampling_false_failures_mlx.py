"""The ``sampling`` kind's false-failure rate on a real, faithful engine: mlx-lm in-process
on the tiny adder, each statistical item repeated :data:`REPEATS` times with fresh seeds. The
judge is the kind's own (:class:`PositionEvidence`: expected distribution, shift by
penalties, support and bias checks, the G statistic's valid p-value); the draws are the
engine's own sampler and logits processors (``sample_next``). Each draw is judged at 0.05
(1,600 judgements have the power to see an excess there) and at the default 0.001
(:data:`tests.false_failures.LEVELS`); beside them, exact multinomial draws from the same
expected distributions are judged the same way. A test of size at most alpha fails within
the one-sided binomial bound at 99.9% (:func:`tests.false_failures.binomial_upper`). The
measured rates are written in ``docs/reference/checks/sampling.md``."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.checks.sampling.evidence import PositionEvidence
from pytest_infercheck.verdict.measure import Unmeasured
from tests.false_failures import Tally

REPEATS = 200
SAMPLES = 2000
ITEMS: list[tuple[str, dict[str, Any], int]] = [
    ("31+", {"temperature": 1.0}, 0),
    ("28+", {"temperature": 1.5, "top_k": 3}, 0),
    ("99+9", {"temperature": 1.0, "top_p": 0.9}, 1),
    ("18+", {"temperature": 0.7, "min_p": 0.1}, 0),
    ("1+1+1+1+", {"temperature": 1.0, "presence_penalty": 1.0}, 0),
    ("1+1+1+1+", {"temperature": 1.0, "frequency_penalty": 0.5}, 1),
    ("99+99+99+", {"temperature": 1.0, "repetition_penalty": 1.3}, 0),
    ("5555", {"temperature": 1.0, "logit_bias": {52: -100.0}}, 0),
]
"""(prompt, parameter set, position): the suite's spread and repeat prompts."""


def false_failures(adder: Path, repeats: int = REPEATS, first_seed: int = 0) -> tuple[Tally, Tally]:
    """The tallies of mlx-lm's draws and of exact multinomial draws over every item x repeat
    (seeds from ``first_seed``: a seed is never used twice)."""
    backend = MlxLmBackend("adder", MlxModelSpec(str(adder), dtype="float32"))
    engine, exact = Tally(), Tally()
    rng = np.random.default_rng(first_seed)
    for n, (text, params, j) in enumerate(ITEMS):
        rendered = backend.render_sync(text, None, thinking=False)
        ids = list(rendered.token_ids or [])
        greedy = list(backend.generate_sync(rendered, GenerationParams(j + 1)).token_ids or [])
        rows = backend.score_sync(ids, greedy)
        raw = asyncio.run(backend.raw_logits(ids, greedy))
        prefix = rendered.__class__(**{**rendered.__dict__, "token_ids": (*ids, *greedy[:j])})
        gp = GenerationParams(
            1,
            temperature=params["temperature"],
            top_k=params.get("top_k"),
            top_p=params.get("top_p"),
            min_p=params.get("min_p"),
            presence_penalty=params.get("presence_penalty"),
            frequency_penalty=params.get("frequency_penalty"),
            repetition_penalty=params.get("repetition_penalty"),
            logit_bias=tuple((params.get("logit_bias") or {}).items()),
        )

        template = PositionEvidence(
            prompt_id=text,
            target="adder@local",
            params=params,
            position=j,
            context=greedy[:j],
            engine="mlx-lm",
            reference="adder@local",
            samples=SAMPLES,
            alpha=0.05,
            family=1,
            counts={},
            logprobs={i: float(v) for i, v in enumerate(np.asarray(rows[j], np.float64))},
            history=[*ids, *greedy[:j]],
            logits={i: float(v) for i, v in enumerate(np.asarray(raw[j], np.float64))},
        )
        analysis = replace(template, counts={0: 1}).analysis
        assert not isinstance(analysis, Unmeasured), analysis
        tokens = sorted(analysis.expected.probs)
        probs = np.array([analysis.expected.probs[t] for t in tokens])
        for r in range(repeats):
            seed = first_seed + 1_000_003 * (n + 1) + r
            drawn = asyncio.run(
                backend.sample_next(
                    prefix, GenerationParams(**{**gp.__dict__, "seed": seed}), SAMPLES
                )
            )
            counts: dict[int, int] = {}
            for t in drawn:
                counts[t] = counts.get(t, 0) + 1
            engine.add(replace(template, counts=counts))
            draw = rng.multinomial(SAMPLES, probs / probs.sum())
            exact.add(
                replace(
                    template, counts={t: int(c) for t, c in zip(tokens, draw, strict=True) if c}
                )
            )
    return engine, exact


def test_the_false_failure_rate_on_mlx_lm_is_within_alpha(tiny_models: dict[str, Path]) -> None:
    engine, exact = false_failures(tiny_models["bf16"])
    assert engine.judged == exact.judged == REPEATS * len(ITEMS)
    print(engine.line("mlx-lm"))
    print(exact.line("exact multinomial"))
    for tally in (engine, exact):
        for level, failed in tally.failed.items():
            assert failed <= tally.bound(level), (level, tally.details[:5])
        # Every failure is a statistical one (a faithful engine never draws outside the support).
        assert all("sampled distribution differs" in d for d in tally.details), tally.details[:5]
