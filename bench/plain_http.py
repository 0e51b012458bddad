"""The plain HTTP loop: a ``diff``'s requests to two servers, and nothing else (a subprocess).

``python bench/plain_http.py LLAMA_URL VLLM_URL MODEL SUITE.jsonl MAX_TOKENS CONCURRENCY``

Sends every prompt's text to llama-server (``/completion``, greedy, ``n_predict``) and then
to vllm-mlx (``/v1/completions``, greedy, ``max_tokens``, ``model`` = MODEL), CONCURRENCY
requests in flight per side (a thread pool over ``urllib``), and prints the tokens each side
generated. It compares nothing: the limit for a harness sending the same requests the
same way (the baseline side first, then the test side), start-up included.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def main(argv: list[str]) -> dict[str, int]:
    llama, vllm, model, suite = argv[0], argv[1], argv[2], Path(argv[3])
    max_tokens, concurrency = int(argv[4]), int(argv[5])
    texts = [json.loads(line)["text"] for line in suite.read_text().splitlines() if line]

    def on_llama(text: str) -> int:
        body = {"prompt": text, "n_predict": max_tokens, "temperature": 0}
        return int(post(llama + "/completion", body)["tokens_predicted"])

    def on_vllm(text: str) -> int:
        body = {"model": model, "prompt": text, "max_tokens": max_tokens, "temperature": 0}
        return int(post(vllm + "/v1/completions", body)["usage"]["completion_tokens"])

    with ThreadPoolExecutor(concurrency) as pool:
        llama_tokens = sum(pool.map(on_llama, texts))
        vllm_tokens = sum(pool.map(on_vllm, texts))
    return {"prompts": len(texts), "llama_tokens": llama_tokens, "vllm_tokens": vllm_tokens}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1:])))
