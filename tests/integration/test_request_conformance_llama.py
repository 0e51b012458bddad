"""request-conformance on a real llama-server (the tiny adder, one slot), faithful and behind
a faulty proxy that drops a parameter, returns the stop string or miscounts usage: each fault
fails the right items, naming the parameter.

Measured on llama-cpp-python 0.3.36's llama.cpp (the adder answers ``12+34=`` with ``4``,
``6``, end-of-sequence): stop strings of one token, two tokens and spanning the boundary are
honoured streamed and not (text cut before the stop string, ``stop_type: word``);
``n_predict`` is exact; ``tokens_evaluated`` is the prompt's ids and ``tokens_predicted`` the
tokens returned, end-of-sequence included; ``n_probs: 3`` gives three top logprobs per token;
``ignore_eos`` runs to ``n_predict``; ``n: 2`` with one slot is refused at the readiness probe
(HTTP 400 "Field 'n' ...": unsupported); ``min_tokens`` and ``include_stop`` are not taken.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, suite_jsonl

PROMPTS = ADDITION[:2]
CHECK = "  - request-conformance: {target: adder@llama}"


def run(pytester: pytest.Pytester, url: str, model: str, check: str = CHECK) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\n"
        f"backends:\n  llama: {{kind: llama-server, url: '{url}'}}\n"
        f"suites: [addition.jsonl]\nchecks:\n{check}\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "-rA", "--infercheck-results=results.json"
    )


def items(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Item name -> its JSON result."""
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item for item in results["items"]}


def failed(pytester: pytest.Pytester) -> dict[str, list[str]]:
    return {
        name: item["violations"]
        for name, item in items(pytester).items()
        if item["outcome"] == "failed" and name != "aggregate"
    }


def test_faithful_llama_server_conforms(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    result = run(pytester, llama_url, adder)
    out = result.stdout.str()
    assert failed(pytester) == {}, out[-4000:]
    data = {n: i["data"] for n, i in items(pytester).items()}
    stop = data["s01[stop-token]"]
    assert stop["asked"] == {"stop": ["6"]} and stop["reference"] == "46"
    assert [(a["mode"], a["text"], a["finish_reason"]) for a in stop["answers"]] == [
        ("non-streamed", "4", "stop"),
        ("streamed", "4", "stop"),
    ]
    assert data["s01[stop-tokens]"]["asked"] == {"stop": ["46"]}
    assert [a["text"] for a in data["s01[stop-tokens]"]["answers"]] == ["", ""]
    cut = data["s01[max-tokens]"]
    assert cut["asked"] == {"max_tokens": 1} and cut["answers"][0]["tokens"] == 1
    usage = data["s01[usage]"]["answers"][0]
    assert (usage["tokens"], usage["completion_tokens"]) == (3, 3)  # '4', '6', EOS
    assert data["s01[ignore-eos]"]["answers"][0]["tokens"] == 6
    assert data["s01[min-tokens]"]["not_sent"] == (
        "not exercised: backend 'llama' (llama-server) does not take min_tokens "
        "(taken by vllm, sglang)"
    )
    # one slot: n: 2 refused at the readiness probe (HTTP 400), so unsupported, not failed
    assert data["s01[n]"]["not_sent"].startswith("unsupported: a request with n: HTTP 400")
    assert data["aggregate"]["probes"]["stop-token"] == {
        "conforming": 2,
        "failed": 0,
        "not sent": 0,
    }


@pytest.mark.parametrize(
    ("fault", "broken", "named"),
    [
        (Fault(drop_params=frozenset({"stop"})), "stop-token", "stop '6'"),
        (Fault(drop_params=frozenset({"n_probs"})), "logprobs", "logprobs 3"),
        (Fault(drop_params=frozenset({"ignore_eos"})), "ignore-eos", "ignore_eos"),
        (Fault(return_stop=True), "stop-token", "(the stop string returned)"),
        (Fault(usage_offset=1), "usage", "usage.completion_tokens 4"),
    ],
    ids=["drop-stop", "drop-n_probs", "drop-ignore_eos", "return-stop", "miscount-usage"],
)
def test_each_fault_fails_its_probe_naming_the_parameter(
    pytester: pytest.Pytester,
    llama_url: str,
    adder: str,
    fault: Fault,
    broken: str,
    named: str,
) -> None:
    with FaultyProxy(llama_url, fault) as proxy:
        run(pytester, proxy.url, adder)
    found = failed(pytester)
    assert f"s01[{broken}]" in found, found
    assert any(named in v for v in found[f"s01[{broken}]"]), found[f"s01[{broken}]"]
    assert items(pytester)["aggregate"]["outcome"] == "failed"


def test_a_probe_the_engine_does_not_take_is_a_collection_error(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    check = "  - request-conformance: {target: adder@llama, probes: [stop-token, min-tokens]}"
    result = run(pytester, llama_url, adder, check)
    out = result.stdout.str()
    assert result.ret != 0
    assert (
        "infercheck.yaml:7: checks[0].request-conformance.probes[1]: probe min-tokens: backend "
        "'llama' (llama-server) does not take min_tokens (taken by vllm, sglang)" in out
    ), out[-3000:]
