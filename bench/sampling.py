"""How long 2,000 draws of one position take per engine, the way the ``sampling`` check
draws them (``checks/sampling/gather.py``): mlx-lm in-process through ``sample_next`` (one
forward pass, its sampler over 2,000 copies of the row); a server by requests at once,
``max_tokens`` 1, bounded by the backend's ``max_concurrency``, each asking ``n`` draws where
the check asks ``n`` (vLLM: 50), else one (llama-server).

    .venv/bin/python bench/sampling.py --mlx MODEL_DIR [--llama-url URL] [--vllm-url URL]

Prompt ``31+`` (the ``sampling`` suite's ``sp001``; ``<s>31+`` on vLLM, whose ``/tokenize``
adds no BOS for the adder's tokenizer) rendered by each engine, parameters
``temperature 1, top_k 3``. Wall clock of the draws only (the model loaded, one warm-up
draw first); the load average is printed before and after: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter
from dataclasses import replace

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import Backend, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.checks.sampling.gather import draws_per_request

PROMPT = "31+"
PARAMS = GenerationParams(1, temperature=1.0, top_k=3)


async def _requests(backend: Backend, prompt: PromptInput, samples: int, per: int) -> Counter[int]:
    calls = []
    left = samples
    while left > 0:
        calls.append(backend.generate(prompt, replace(PARAMS, n=min(per, left))))
        left -= per
    counts: Counter[int] = Counter()
    for g in await asyncio.gather(*calls):
        for choice in (g, *g.others):
            counts[(choice.token_ids or [-1])[0]] += 1
    return counts


def time_mlx(model: str, samples: int) -> tuple[float, Counter[int]]:
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec

    backend = MlxLmBackend("mlx", MlxModelSpec(model, dtype="float32"))
    prompt = backend.render_sync(PROMPT, None, thinking=False)
    asyncio.run(backend.sample_next(prompt, PARAMS, 1))
    started = time.perf_counter()
    drawn = asyncio.run(backend.sample_next(prompt, PARAMS, samples))
    return time.perf_counter() - started, Counter(drawn)


def time_server(
    kind: str, url: str, samples: int, concurrency: int, model: str | None = None
) -> tuple[float, Counter[int]]:
    settings = HttpSettings(url.rstrip("/"), max_concurrency=concurrency)
    backend: Backend
    if kind == "llama-server":
        from pytest_infercheck.backends.llama_server import LlamaServerBackend

        backend, per = LlamaServerBackend("llama", settings), 0
    else:
        from pytest_infercheck.backends.vllm import VllmBackend

        vllm = VllmBackend("vllm", settings, model=model, chat=False, source=model)
        backend, per = vllm, 50

    async def run() -> tuple[float, Counter[int]]:
        await backend.ensure_ready()
        nonlocal per
        per = per or draws_per_request(backend)
        # vLLM's /tokenize adds no BOS for the adder's tokenizer (mlx-lm and llama.cpp do)
        prompt = await backend.render(("<s>" if kind == "vllm" else "") + PROMPT, None, False)
        await _requests(backend, prompt, 1, per)
        started = time.perf_counter()
        counts = await _requests(backend, prompt, samples, per)
        elapsed = time.perf_counter() - started
        await backend.aclose()
        return elapsed, counts

    return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mlx", help="an mlx model folder (the tiny adder)")
    parser.add_argument("--llama-url")
    parser.add_argument("--vllm-url")
    parser.add_argument("--vllm-model", help="the served model's name (its folder)")
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()}")
    rows = []
    if args.mlx:
        rows.append(("mlx-lm in-process", *time_mlx(args.mlx, args.samples)))
    if args.llama_url:
        timed = time_server("llama-server", args.llama_url, args.samples, args.concurrency)
        rows.append(("llama-server", *timed))
    if args.vllm_url:
        timed = time_server("vllm", args.vllm_url, args.samples, args.concurrency, args.vllm_model)
        rows.append(("vllm", *timed))
    for name, elapsed, counts in rows:
        top = ", ".join(f"{t}: {n}" for t, n in counts.most_common(4))
        print(f"{name:20s} {args.samples} draws in {elapsed:7.2f} s ({top})")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
