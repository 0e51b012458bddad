"""request-conformance on mlx-lm in process (the tiny tool model): it takes ``max_tokens``
and top logprobs, which it honours (exactly ``m`` tokens, the greedy output's first; ``k``
top logprobs a token); the stop strings, ``n``, ``min_tokens`` and ``ignore_eos`` are not
its parameters and ``usage`` is its own count: not exercised, decided from the matrix, with
the reason; no streamed answer (it has no stream), said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.plugin.conftest import INI


def test_mlx_lm_in_process_conforms_on_what_it_takes(
    pytester: pytest.Pytester, tiny_tool: Path
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(
        ".jsonl", plain='{"id": "t01", "prompt": "what is 57 plus 444?", "max_tokens": 24}\n'
    )
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{tiny_tool}'}}\n"
        "backends:\n  local: {kind: mlx-lm}\nsuites: [plain.jsonl]\n"
        "checks:\n  - request-conformance: {target: tool@local, top_logprobs: 4}\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    assert result.ret == 0, result.stdout.str()[-3000:]
    found = {
        i["name"]: i["data"] for i in json.loads((pytester.path / "r.json").read_text())["items"]
    }
    cut = found["t01[max-tokens]"]
    m = cut["asked"]["max_tokens"]
    assert [(a["mode"], a["tokens"], a["finish_reason"]) for a in cut["answers"]] == [
        ("non-streamed", m, "length")
    ]
    assert cut["notes"] == ["no streamed answer: the engine runs in-process"]
    assert found["t01[logprobs]"]["asked"] == {"logprobs": 4}
    assert found["t01[usage]"]["not_sent"] == (
        "not exercised: mlx-lm runs in-process: it reports no usage (its counts are its own)"
    )
    assert found["t01[n]"]["not_sent"] == (
        "not exercised: backend 'local' (mlx-lm) does not take n "
        "(taken by llama-server, vllm, openai, sglang)"
    )
    assert found["aggregate"]["probes"]["max-tokens"] == {
        "conforming": 1,
        "failed": 0,
        "not sent": 0,
    }
