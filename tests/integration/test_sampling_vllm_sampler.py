"""The vLLM model of :mod:`pytest_infercheck.metrics.sampling.engines` against vLLM's own
sampler functions (the CPU build's venv, ``scripts/install_vllm.sh``): the distribution
``Sampler.apply_temperature``, ``MinPLogitsProcessor.apply`` and
``apply_top_k_top_p_pytorch`` leave, in the order ``Sampler.sample`` calls them, equals the
expected one; where llama.cpp's order differs, vLLM's result is not llama.cpp's. And
``apply_penalties`` (repetition, frequency, presence) against the vllm penalty model, on raw
logits (so the repetition penalty's sign rule is exercised)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from pytest_infercheck.metrics.sampling import (
    Penalties,
    SamplingParams,
    expected_distribution,
    penalized_logits,
)

RAW = [0.4, 0.3, 0.15, 0.1, 0.05]
CASES = [
    SamplingParams(0.5),
    SamplingParams(1.0, top_k=3),
    SamplingParams(0.7, top_p=0.8),
    SamplingParams(0.5, min_p=0.3),
    SamplingParams(2.0, top_p=0.75),
    SamplingParams(1.0, top_k=2, top_p=0.5),
    SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2),
]
ORDER_MATTERS = {3, 4, 6}
"""The cases where llama.cpp's order (truncations before temperature) gives another
distribution: min-p, or a top-p cut that moves, after a temperature."""

SCRIPT = r"""
import json, math, sys
import torch
from vllm.v1.sample.sampler import Sampler
from vllm.v1.sample.logits_processor.builtin import MinPLogitsProcessor
from vllm.v1.sample.ops.topk_topp_sampler import apply_top_k_top_p_pytorch

from vllm.model_executor.layers.utils import apply_penalties

raw, cases, pen = json.loads(sys.stdin.read())
out = []
for t, k, p, m in cases:
    logits = torch.log(torch.tensor([raw], dtype=torch.float32))
    logits = Sampler.apply_temperature(logits, torch.tensor([t]), True)
    if m:
        proc = MinPLogitsProcessor.__new__(MinPLogitsProcessor)
        proc.min_p_count = 1
        proc.min_p = torch.tensor([[m]], dtype=torch.float32)
        logits = proc.apply(logits)
    logits = apply_top_k_top_p_pytorch(
        logits,
        torch.tensor([k]) if k else None,
        torch.tensor([p], dtype=torch.float32) if p else None,
    )
    out.append(torch.softmax(logits, dim=-1)[0].tolist())
penalised = []
for logits, prompt, output, presence, frequency, repetition in pen:
    x = torch.tensor([logits], dtype=torch.float32)
    apply_penalties(
        x,
        torch.tensor([prompt], dtype=torch.long),
        torch.tensor([output], dtype=torch.long),
        torch.tensor([presence]),
        torch.tensor([frequency]),
        torch.tensor([repetition]),
    )
    penalised.append(x[0].tolist())
print(json.dumps([out, penalised]))
"""


LOGITS = [2.0, -1.0, 0.5, 0.0, -2.0]
PENALTY_CASES = [
    # (prompt, output, penalties): repetition over prompt and output, the others the output
    (
        [1, 2],
        [2, 4, 2],
        Penalties(presence_penalty=0.3, frequency_penalty=0.5, repetition_penalty=2.0),
    ),
    ([0, 3], [1], Penalties(repetition_penalty=1.5)),
    ([4, 4, 4], [0, 0], Penalties(presence_penalty=1.0, frequency_penalty=0.25)),
]


@pytest.fixture(scope="module")
def vllm_results(vllm_python: Path) -> list[list[list[float]]]:
    cases = [[c.temperature, c.top_k, c.top_p, c.min_p] for c in CASES]
    pen = [
        [
            LOGITS,
            prompt,
            output,
            p.presence_penalty or 0.0,
            p.frequency_penalty or 0.0,
            p.repetition_penalty or 1.0,
        ]
        for prompt, output, p in PENALTY_CASES
    ]
    done = subprocess.run(
        [str(vllm_python), "-c", SCRIPT],
        input=json.dumps([RAW, cases, pen]),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[list[list[float]]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.fixture(scope="module")
def vllm_distributions(vllm_results: list[list[list[float]]]) -> list[list[float]]:
    return vllm_results[0]


@pytest.mark.parametrize("index", range(len(PENALTY_CASES)))
def test_vllm_penalties_give_the_vllm_model(
    vllm_results: list[list[list[float]]], index: int
) -> None:
    prompt, output, penalties = PENALTY_CASES[index]
    got = dict(enumerate(vllm_results[1][index]))
    logits = dict(enumerate(LOGITS))
    want = penalized_logits(logits, penalties, "vllm", generated=output, prompt=prompt)
    assert got == pytest.approx(want, abs=1e-6)
    # llama.cpp counts the prompt for every penalty: another result where the prompt repeats
    llama = penalized_logits(logits, penalties, "llama-server", generated=output, prompt=prompt)
    assert (llama != pytest.approx(want, abs=1e-6)) == bool(
        penalties.presence_penalty or penalties.frequency_penalty
    )


@pytest.mark.parametrize("index", range(len(CASES)))
def test_vllm_sampler_gives_the_vllm_model(
    vllm_distributions: list[list[float]], index: int
) -> None:
    params = CASES[index]
    logprobs = {i: math.log(p) for i, p in enumerate(RAW)}
    expected = expected_distribution(logprobs, params, "vllm")
    got = {i: q for i, q in enumerate(vllm_distributions[index]) if q > 0}
    assert set(got) == set(expected.probs), params
    for token, q in got.items():
        assert q == pytest.approx(expected.probs[token], abs=1e-6), (params, token)
    llama = expected_distribution(logprobs, params, "llama-server")
    differs = set(llama.probs) != set(got) or any(abs(llama.probs[t] - got[t]) > 1e-4 for t in got)
    # worked by hand in tests/unit/test_sampling_engines.py
    assert differs == (index in ORDER_MATTERS), params
