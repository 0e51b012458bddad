"""The vLLM model of :mod:`pytest_infercheck.metrics.sampling.engines` against vLLM's own
sampler functions (the CPU build's venv, ``scripts/install_vllm.sh``): the distribution
``Sampler.apply_temperature``, ``MinPLogitsProcessor.apply`` and
``apply_top_k_top_p_pytorch`` leave, in the order ``Sampler.sample`` calls them, equals the
expected one; where llama.cpp's order differs, vLLM's result is not llama.cpp's."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from pytest_infercheck.metrics.sampling import SamplingParams, expected_distribution

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

raw, cases = json.loads(sys.stdin.read())
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
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllm_distributions(vllm_python: Path) -> list[list[float]]:
    cases = [[c.temperature, c.top_k, c.top_p, c.min_p] for c in CASES]
    done = subprocess.run(
        [str(vllm_python), "-c", SCRIPT],
        input=json.dumps([RAW, cases]),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


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
