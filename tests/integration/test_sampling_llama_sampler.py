"""The llama-server model of :mod:`pytest_infercheck.metrics.sampling.engines` against the
distribution llama-server itself reports after its sampler chain (``post_sampling_probs``)
on the tiny adder, prompt ``12+`` (a spread next token: .497, .275, .086, .079, .041, ...):
equal to float32 precision, and unequal to the other engines' orders where they differ; and
its presence and frequency penalties and ``logit_bias``, by the llama-server penalty model."""

from __future__ import annotations

import json
import math
import urllib.request
from typing import Any

import pytest

from pytest_infercheck.metrics.sampling import (
    Expected,
    Penalties,
    SamplingParams,
    compare_processed,
    expected_distribution,
    penalized_logprobs,
)

PROMPT = "12+"
VOCAB = 1000
"""More than the tiny model's 259 tokens: the whole vocabulary."""

CASES = [
    # (params, the engine whose order gives another distribution here)
    (SamplingParams(0.7, top_k=5, top_p=0.9), "vllm"),
    (SamplingParams(0.5, min_p=0.1), "vllm"),
    (SamplingParams(2.0, top_p=0.8), "vllm"),
    (SamplingParams(1.0, top_k=2, top_p=0.6), "mlx-lm"),
    (SamplingParams(0.8, top_k=6, top_p=0.95, min_p=0.02), "vllm"),
    (SamplingParams(1.5), None),
]


def _ask(url: str, **fields: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": 1, "n_probs": VOCAB, "cache_prompt": False, **fields}
    request = urllib.request.Request(
        f"{url}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        entry: dict[str, Any] = json.load(response)["completion_probabilities"][0]
    return entry


@pytest.fixture(scope="module")
def raw(llama_url: str) -> dict[int, float]:
    """The raw next-token logprobs over the whole vocabulary."""
    entry = _ask(llama_url, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    return {int(t["id"]): float(t["logprob"]) for t in entry["top_logprobs"]}


def _gap(reported: dict[int, float], expected: Expected) -> float:
    tokens = set(reported) | set(expected.probs)
    return max(abs(reported.get(t, 0.0) - expected.probs.get(t, 0.0)) for t in tokens)


@pytest.mark.parametrize(("params", "other"), CASES)
def test_llama_server_reports_the_llama_model(
    llama_url: str, raw: dict[int, float], params: SamplingParams, other: str | None
) -> None:
    assert len(raw) > 200
    entry = _ask(
        llama_url,
        temperature=params.temperature,
        top_k=params.top_k or 0,
        top_p=params.top_p or 1.0,
        min_p=params.min_p or 0.0,
        post_sampling_probs=True,
    )
    reported = {int(t["id"]): float(t["prob"]) for t in entry["top_probs"]}
    expected = expected_distribution(raw, params, "llama-server")
    assert expected.boundary == frozenset()
    assert set(reported) == set(expected.probs)
    assert _gap(reported, expected) < 1e-6
    gap = compare_processed(reported, expected, asked=VOCAB)
    assert gap.max_abs < 1e-6 and gap.extra == () and gap.missing == ()
    if other is not None:
        assert _gap(reported, expected_distribution(raw, params, other)) > 1e-3
        wrong = compare_processed(reported, expected_distribution(raw, params, other))
        assert wrong.extra or wrong.missing or wrong.max_abs > 1e-3


def _post(url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{url}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        out: dict[str, Any] = json.load(response)
    return out


PENALTY_CASES = [
    # (prompt, penalties, repeat_last_n): "2+2+" repeats "2" and "+", and its next token is
    # spread (.469, .452, .037, ...), so counting once or twice, or the prompt or not, shows
    ("2+2+", Penalties(frequency_penalty=0.8), None),
    ("2+2+", Penalties(presence_penalty=0.8), None),
    ("2+2+", Penalties(frequency_penalty=0.8), 2),
    ("33+", Penalties(presence_penalty=0.5, frequency_penalty=0.3, logit_bias=((55, 1.5),)), None),
    ("12+", Penalties(logit_bias=((54, -2.0), (56, 0.7))), None),
]


@pytest.mark.parametrize(("prompt", "penalties", "last_n"), PENALTY_CASES)
def test_llama_server_penalties_follow_the_llama_model(
    llama_url: str, prompt: str, penalties: Penalties, last_n: int | None
) -> None:
    """Presence and frequency count the prompt's tokens too, within ``repeat_last_n``; the
    repetition penalty needs raw logits, which the server does not report, so it is left
    out here."""
    neutral = {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0}
    entry = _ask(llama_url, **neutral, prompt=prompt)
    raw = {int(t["id"]): float(t["logprob"]) for t in entry["top_logprobs"]}
    tokens = _post(llama_url, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    window = {} if last_n is None else {"repeat_last_n": last_n}
    entry = _ask(
        llama_url,
        **neutral,
        **window,
        prompt=prompt,
        presence_penalty=penalties.presence_penalty or 0.0,
        frequency_penalty=penalties.frequency_penalty or 0.0,
        logit_bias=[list(b) for b in penalties.logit_bias],
        post_sampling_probs=True,
    )
    reported = {int(t["id"]): float(t["prob"]) for t in entry["top_probs"]}
    expected = penalized_logprobs(
        raw, penalties, "llama-server", prompt=tokens, window=last_n if last_n else -1
    )
    assert max(abs(reported.get(t, 0.0) - math.exp(v)) for t, v in expected.items()) < 1e-6
    # the output-only count of vLLM and OpenAI gives another distribution on this prompt
    if penalties.presence_penalty or penalties.frequency_penalty:
        other = penalized_logprobs(raw, penalties, "vllm", prompt=tokens)
        assert max(abs(reported.get(t, 0.0) - math.exp(v)) for t, v in other.items()) > 1e-3
