"""The vllm-mlx model of :mod:`pytest_infercheck.metrics.sampling.engines` against the sampler
vllm-mlx 0.6.0's simple engine builds (``make_sampler(temp, top_p, top_k, min_p)`` of the
mlx-lm 0.31.3 its venv pins, whose ``apply_top_p`` differs in code from 0.32.2's): draws of
a fixed five-token distribution fit the vllm-mlx model, not llama.cpp's order."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest

from pytest_infercheck.metrics.sampling import (
    SamplingParams,
    expected_distribution,
    goodness_of_fit,
)

RAW = [0.4, 0.3, 0.15, 0.1, 0.05]
N = 4000
CASES = [
    SamplingParams(0.7, top_p=0.8),
    SamplingParams(2.0, top_p=0.75),
    SamplingParams(1.0, top_k=2, top_p=0.5),
    SamplingParams(0.5, top_k=4, top_p=0.9, min_p=0.2),
]

SCRIPT = r"""
import json, sys
from collections import Counter
import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

raw, n, cases = json.loads(sys.stdin.read())
out = []
for i, (t, k, p, m) in enumerate(cases):
    sampler = make_sampler(temp=t, top_p=p or 0.0, top_k=k or 0, min_p=m or 0.0)
    mx.random.seed(100 + i)
    logprobs = mx.broadcast_to(mx.log(mx.array([raw])), (n, len(raw)))
    out.append(Counter(int(x) for x in sampler(logprobs).tolist()))
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def vllm_mlx_counts(vllm_mlx_bin: Path) -> list[dict[str, int]]:
    python = vllm_mlx_bin.parent / "python"
    cases = [[c.temperature, c.top_k, c.top_p, c.min_p] for c in CASES]
    done = subprocess.run(
        [str(python), "-c", SCRIPT],
        input=json.dumps([RAW, N, cases]),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: list[dict[str, int]] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.parametrize("index", range(len(CASES)))
def test_vllm_mlx_draws_fit_the_vllm_mlx_model(
    vllm_mlx_counts: list[dict[str, int]], index: int
) -> None:
    params = CASES[index]
    logprobs = {i: math.log(p) for i, p in enumerate(RAW)}
    counts = {int(t): c for t, c in vllm_mlx_counts[index].items()}
    fit = goodness_of_fit(counts, expected_distribution(logprobs, params, "vllm-mlx"))
    assert fit.outside_support == () and fit.p_value > 1e-4, fit
    # llama.cpp's top-p sees the top-k survivors renormalised: case 2 only differs
    llama = goodness_of_fit(counts, expected_distribution(logprobs, params, "llama-server"))
    assert (llama.outside_support != () or llama.p_value < 1e-6) == (index == 2), llama
