"""cache-pollution on real servers, and on a proxy that a hostile request poisons.

Findings on the tiny adder (recorded, not judged; asserted where stable): llama-server
answers the context overflow with HTTP 400 ``exceed_context_size_error``, malformed UTF-8
bytes in the JSON body with HTTP 500 (a JSON parse error: a 400 would be right), lone
surrogates with a completion, and ``n_predict: 0`` with one generated token; it stays alive
and its reference outputs are unchanged. vllm-mlx answers ``max_tokens: 0`` with HTTP 422
and runs an over-long prompt; it also stays alive and unchanged.

Sharded, the aggregate merged from shards 1/2 and 2/2 is the unsharded run's, and every
aggregate is ``summarize`` of its items' records.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_infercheck.backends.hostile import HOSTILE_MARKER
from pytest_infercheck.report.merge import merge_results
from pytest_infercheck.report.results import load_results
from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, suite_jsonl
from tests.resummarize import aggregates, assert_same_aggregate, resummarized

PROMPTS = ADDITION[:3]
CHECK = (
    "  - cache-pollution: {target: adder@llama, hostile: [context-overflow, invalid-utf8,"
    " special-tokens, max-tokens-0, disconnect]}"
)


def run(
    pytester: pytest.Pytester,
    url: str,
    model: str,
    backend: str = "llama-server",
    args: tuple[str, ...] = ("--infercheck-results=results.json",),
) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\n"
        f"backends:\n  llama: {{kind: {backend}, url: '{url}'}}\n"
        f"suites: [addition.jsonl]\nchecks:\n{CHECK}\n",
    )
    return pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *args)


def records(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Item name -> data, from the JSON results."""
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item["data"] for item in results["items"]}


def test_llama_server_survives_hostile_requests(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    result = run(pytester, llama_url, adder)
    assert result.parseoutcomes() == {"passed": 5 + 1}, result.stdout.str()
    data = records(pytester)
    assert data["context-overflow"]["response"].startswith("HTTP 400")
    assert "raw bytes: HTTP 500" in data["invalid-utf8"]["response"]
    assert data["disconnect"]["response"] == "HTTP 200, closed after the first event"
    assert all(data[k]["alive"] and data[k]["changed"] == [] for k in data if k != "aggregate")
    assert data["aggregate"]["n_polluted"] == 0


def test_poisoned_server_fails(pytester: pytest.Pytester, llama_url: str, adder: str) -> None:
    with FaultyProxy(llama_url, Fault(poison=HOSTILE_MARKER)) as proxy:
        result = run(pytester, proxy.url, adder)
    assert result.parseoutcomes() == {"failed": 5 + 1}, result.stdout.str()
    data = records(pytester)
    changed = data["context-overflow"]["changed"]
    assert [c["prompt_id"] for c in changed] == ["s01", "s02", "s03"]
    assert changed[0]["before"] == "46" and changed[0]["after"] != "46"
    assert "reference outputs changed after the context-overflow request" in result.stdout.str()


def run_shards(pytester: pytest.Pytester, url: str, model: str) -> list[tuple[str, Any]]:
    """The project (against ``url``) run as shards 1/2 and 2/2 of one run id: each shard's
    results file."""
    shards = []
    for index in (1, 2):
        run(
            pytester,
            url,
            model,
            args=(
                f"--infercheck-shard={index}/2",
                "--infercheck-run-id=pollution-shards",
                f"--infercheck-results=s{index}.json",
            ),
        )
        shards.append((f"s{index}.json", load_results(pytester.path / f"s{index}.json")))
    kinds = [{i["name"] for i in r["items"] if i["role"] == "hostile"} for _, r in shards]
    assert all(kinds) and not kinds[0] & kinds[1]  # a partition of the hostile requests
    return shards


def test_the_aggregate_merged_from_two_shards_is_the_unsharded_one(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """The aggregate is ``summarize`` of the hostile items' records: live, from the unsharded
    results file's records in either order, and from the union of shards 1/2 and 2/2 (merged
    by ``merge_results``): one verdict, the same violations and the same numbers."""
    run(pytester, llama_url, adder)
    whole = load_results(pytester.path / "results.json")
    (merged,), warnings = merge_results(run_shards(pytester, llama_url, adder))
    assert warnings == []
    ((nodeid, live),) = aggregates(whole).items()
    for reverse in (False, True):
        assert_same_aggregate(resummarized(whole, nodeid, reverse=reverse), live)
    got = aggregates(merged)[nodeid]
    assert got.get("gates_deferred_to") is None
    assert_same_aggregate(got, live)
    assert live["outcome"] == "passed" and live["data"]["n_hostile"] == 5


def test_a_poisoned_server_fails_the_aggregate_from_its_records_and_at_the_merge(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """Behind a proxy that the first hostile request poisons for good, the aggregate (failing
    on every hostile kind) is ``summarize`` of its records in either order. Sharded, the
    shards defer the gate; the first shard's requests poison the proxy, so the second finds
    its outputs altered before and after alike: the merge fails naming the first shard's
    kinds (a polluted server cannot be sharded into a pass)."""
    with FaultyProxy(llama_url, Fault(poison=HOSTILE_MARKER)) as proxy:
        run(pytester, proxy.url, adder)
    whole = load_results(pytester.path / "results.json")
    ((nodeid, live),) = aggregates(whole).items()
    assert live["outcome"] == "failed" and live["data"]["n_polluted"] == 5
    for reverse in (False, True):
        assert_same_aggregate(resummarized(whole, nodeid, reverse=reverse), live)
    with FaultyProxy(llama_url, Fault(poison=HOSTILE_MARKER)) as proxy:
        shards = run_shards(pytester, proxy.url, adder)
    for _, results in shards:
        (aggregate,) = aggregates(results).values()
        assert aggregate["outcome"] == "passed" and aggregate["gates_deferred_to"]
    (merged,), _ = merge_results(shards)
    got = aggregates(merged)[nodeid]
    first = [i["name"] for i in shards[0][1]["items"] if i["role"] == "hostile"]
    assert got["outcome"] == "failed" and got["data"]["n_polluted"] >= len(first)
    (changed,) = [v for v in got["violations"] if v.startswith("reference outputs changed")]
    assert all(kind in changed for kind in first)


def test_a_reference_prompt_that_fails_after_a_hostile_request_fails_its_item(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """The proxy answers HTTP 500 to the second request of every prompt: the reference
    prompts' requests after the first hostile request (context-overflow). The hostile
    request's own answer is recorded, not judged; the failed reference requests fail that
    item with the server's message, and the aggregate names it. Later items (the third
    requests) pass, disconnect too: its prompt is max-tokens-0's, so its request was the
    second of that prompt, and the 500 is its answer (recorded, not judged)."""
    with FaultyProxy(llama_url, Fault(fail_nth_of_prompt=2)) as proxy:
        result = run(pytester, proxy.url, adder)
    assert proxy.failed == 4  # s01, s02, s03 after context-overflow; disconnect's request
    outcomes = {
        item["name"]: item["outcome"]
        for item in json.loads((pytester.path / "results.json").read_text())["items"]
    }
    assert outcomes == {
        "context-overflow": "failed",
        "invalid-utf8": "passed",
        "special-tokens": "passed",
        "max-tokens-0": "passed",
        "disconnect": "passed",
        "aggregate": "failed",
    }
    assert records(pytester)["disconnect"]["response"].startswith("HTTP 500 before streaming")
    data = records(pytester)["context-overflow"]
    assert data["alive"] is True and data["changed"] == []
    said = "HTTP 500: faulty proxy: HTTP 500 on purpose"  # the server's words, from its body
    assert data["failure"] == "; ".join(
        f"the reference prompts after the context-overflow request: {p} failed: {said}"
        for p in ("s01", "s02", "s03")
    )
    result.stdout.fnmatch_lines(
        [
            "*FAILED *::context-overflow - the reference prompts after the context-overflow "
            f"request: s01 failed: {said} (+2 more)",
            "*reference prompts failed after: context-overflow*",
        ]
    )
