"""The ``sampling`` kind's false-failure rate on a real, faithful llama-server (16 slots) on the
tiny adder: each statistical item repeated :data:`REPEATS` times, :data:`SAMPLES` draws a
time drawn the way the kind draws them (``checks/sampling/gather.py``: the backend's
``generate`` with ``n``, which llama-server answers by ``n_cmpl`` children decoded in its
slots, a random seed each), judged by the kind's own judge (:class:`PositionEvidence`)
against llama-server's own raw log-probabilities over the whole vocabulary (``n_probs``, the
neutral truncations) by llama.cpp's order of the truncations. Each draw is judged at 0.05
and at the default 0.001 (:data:`tests.false_failures.LEVELS`) and held to the one-sided
binomial bound at 99.9% (:func:`tests.false_failures.binomial_upper`). :data:`SAMPLES` is
100, not the kind's 2,000: the size of the test does not depend on the draws' number (the
p-value is valid at any count: ``metrics/sampling/exact.py``), and llama-server's draws cost
about 1.3 ms each here (16 slots, ``n_cmpl`` 16: ``bench/sampling.py``), so 800 x 400 draws
took 25 minutes under load, too long for every CI run. The measured rates, at 400 and at
100 draws, are written in ``docs/reference/checks/sampling.md``."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.checks.sampling.evidence import PositionEvidence
from tests.false_failures import Tally
from tests.integration.served import llama_flags, llama_server

REPEATS = 200
SAMPLES = 100
SLOTS = 16
ITEMS: list[tuple[str, dict[str, Any]]] = [
    ("31+", {"temperature": 1.0}),
    ("28+", {"temperature": 1.5, "top_k": 3}),
    ("12+", {"temperature": 1.0, "top_p": 0.9}),
    ("18+", {"temperature": 0.7, "min_p": 0.1}),
]
"""(prompt, parameter set) at the first position: the suite's spread prompts."""
VOCAB = 1000
"""More than the adder's 259 tokens: ``n_probs`` lists the whole vocabulary."""


@pytest.fixture(scope="module")
def llama(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, llama_flags(SLOTS, 64 * SLOTS)) as url:
        yield url


def _raw(url: str, ids: list[int]) -> dict[int, float]:
    """The raw next-token log-probabilities of ``ids`` over the whole vocabulary."""
    body = {
        "prompt": ids,
        "n_predict": 1,
        "n_probs": VOCAB,
        "temperature": 1.0,
        "top_k": 0,
        "top_p": 1.0,
        "min_p": 0.0,
    }
    request = urllib.request.Request(
        f"{url}/completion", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        entry = json.load(response)["completion_probabilities"][0]
    return {int(t["id"]): float(t["logprob"]) for t in entry["top_logprobs"]}


def false_failures(url: str, repeats: int = REPEATS) -> Tally:
    """The tally of llama-server's draws over every item x repeat."""
    tally = Tally()

    async def run() -> None:
        backend = LlamaServerBackend("llama", HttpSettings(url, max_concurrency=SLOTS))
        await backend.ensure_ready()
        try:
            for text, params in ITEMS:
                prompt = await backend.render(text, None, False)
                ids = list(prompt.token_ids or [])
                logprobs = _raw(url, ids)
                assert len(logprobs) > 200
                gp = GenerationParams(
                    1,
                    temperature=params["temperature"],
                    top_k=params.get("top_k"),
                    top_p=params.get("top_p"),
                    min_p=params.get("min_p"),
                )
                sizes = [min(SLOTS, SAMPLES - i) for i in range(0, SAMPLES, SLOTS)]
                for _ in range(repeats):
                    answers = await asyncio.gather(
                        *(backend.generate(prompt, replace(gp, n=n)) for n in sizes)
                    )
                    counts = Counter(
                        (choice.token_ids or [-1])[0] for g in answers for choice in (g, *g.others)
                    )
                    tally.add(
                        PositionEvidence(
                            prompt_id=text,
                            target="adder@llama",
                            params=params,
                            position=0,
                            context=[],
                            engine="llama-server",
                            reference="adder@llama",
                            samples=SAMPLES,
                            alpha=0.05,
                            family=1,
                            counts=dict(counts),
                            logprobs=logprobs,
                            history=ids,
                        )
                    )
        finally:
            await backend.aclose()

    asyncio.run(run())
    return tally


def test_the_false_failure_rate_on_llama_server_is_within_alpha(llama: str) -> None:
    tally = false_failures(llama)
    assert tally.judged == REPEATS * len(ITEMS)
    print(tally.line("llama-server"))
    for level, failed in tally.failed.items():
        assert failed <= tally.bound(level), (level, tally.details[:5])
    # Every failure is a statistical one (a faithful engine never draws outside the support).
    assert all("sampled distribution differs" in d for d in tally.details), tally.details[:5]
