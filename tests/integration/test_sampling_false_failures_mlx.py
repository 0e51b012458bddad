"""The ``sampling`` kind's false-failure rate on a real, faithful engine: mlx-lm in-process
on the tiny adder, each statistical item repeated :data:`REPEATS` times with fresh seeds at
``alpha`` :data:`ALPHA` (large, to have events; the family is one item, so the item's level
is alpha). The judge is the kind's own (:class:`PositionEvidence`: expected distribution,
shift by penalties, support and bias checks, G-test); the draws are the engine's own sampler
and logits processors (``sample_next``). A faithful engine fails a fraction alpha of them at
most, up to sampling error: the rate over ``N`` judgements must be within ``alpha + 3
sqrt(alpha (1 - alpha) / N)``. The measured rate is written in
``docs/reference/checks/sampling.md``."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

import numpy as np

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.checks.sampling.evidence import PositionEvidence
from pytest_infercheck.verdict.measure import Finding

ALPHA = 0.05
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


def false_failures(
    adder: Path, repeats: int = REPEATS, first_seed: int = 0
) -> tuple[int, int, list[str]]:
    """(failed, judged, the failures' details) over every item x repeat (seeds from
    ``first_seed``: a seed is never used twice)."""
    backend = MlxLmBackend("adder", MlxModelSpec(str(adder), dtype="float32"))
    failed, judged, details = 0, 0, []
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
            e = PositionEvidence(
                prompt_id=text,
                target="adder@local",
                params=params,
                position=j,
                context=greedy[:j],
                engine="mlx-lm",
                reference="adder@local",
                samples=SAMPLES,
                alpha=ALPHA,
                family=1,
                counts=counts,
                logprobs={i: float(v) for i, v in enumerate(np.asarray(rows[j], np.float64))},
                history=[*ids, *greedy[:j]],
                logits={i: float(v) for i, v in enumerate(np.asarray(raw[j], np.float64))},
            )
            fit = e.fit
            assert isinstance(fit, Finding), (text, params, fit)
            judged += 1
            if not fit.ok:
                failed += 1
                details.append(f"{text} {params} pos{j} seed {seed}: {fit.detail}")
    return failed, judged, details


def test_the_false_failure_rate_on_mlx_lm_is_within_alpha(tiny_models: dict[str, Path]) -> None:
    failed, judged, details = false_failures(tiny_models["bf16"])
    assert judged == REPEATS * len(ITEMS)
    rate = failed / judged
    bound = ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / judged)
    print(f"false failures: {failed} of {judged} = {rate:.4f} (alpha {ALPHA}, bound {bound:.4f})")
    assert rate <= bound, (rate, bound, details[:5])
    # Every failure is a G-test's (a faithful engine never draws outside the support).
    assert all("sampled distribution differs" in d for d in details), details[:5]
