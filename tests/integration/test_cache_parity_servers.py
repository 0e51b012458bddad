"""cache-parity on real servers: faithful engines pass (or give what they really give), and
a faulty proxy that perturbs only a repeated request, or only later turns served from the
cache, fails the check naming the scenario and the first divergent token."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, suite_jsonl

PROMPTS = ADDITION[:3]


def run(
    pytester: pytest.Pytester,
    url: str,
    model: str,
    backend: str = "llama-server",
    options: str = "",
    prompts: list[tuple[str, str, str]] = PROMPTS,
) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(prompts))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\n"
        f"backends:\n  srv: {{kind: {backend}, url: '{url}'}}\n"
        f"suites: [addition.jsonl]\nchecks:\n"
        f"  - cache-parity: {{target: adder@srv{options}}}\n    logprob_tolerance: 0.0\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json", "-rA"
    )


def records(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Item name -> data, from the JSON results."""
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item["data"] for item in results["items"]}


def scenarios(record: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {s["scenario"]: s for s in record["scenarios"]}


def test_llama_server_cache_is_identical_to_no_cache(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """One slot of 64 tokens (``llama_flags(slots=1, context=64)``), prompt cache in host
    RAM at its default (``--cache-ram 8192``): every scenario's tokens and logprobs equal the
    ``cache_prompt: false`` reference exactly, with the hits ``timings.cache_n`` reports."""
    result = run(pytester, llama_url, adder, options=", eviction_tokens: 64")
    result.assert_outcomes(passed=4)
    s01 = scenarios(records(pytester)["s01"])
    assert records(pytester)["s01"]["reference_cached_tokens"] == 0
    # s01 is <s> 1 2 + 3 4 = (7 ids): its sibling "12+3=4" shares 5, the exact repeat
    # reuses all but the last prompt token, as does the concurrent pair (s01 ran last).
    assert s01["shared-prefix"]["cached_tokens"] == 5
    assert s01["exact-repeat"]["cached_tokens"] == 6
    assert all(s["match"] and s["max_logprob_diff"] == 0.0 for s in s01.values())
    # 8 prompts of 9 tokens filled the slot (64), and the prefix came back whole: llama.cpp's
    # host-RAM prompt cache (--cache-ram) restored it (a finding, shown on the item).
    assert s01["eviction"]["note"].startswith("after 8 prompts of 9 tokens (capacity 64)")
    assert s01["eviction"]["cached_tokens"] == 6


@pytest.mark.parametrize(
    ("fault", "scenario"),
    [
        (Fault(perturb_repeat=True), "shared-prefix"),
        (Fault(perturb_later_turns=True), "multi-turn"),
    ],
)
def test_a_cache_that_changes_outputs_fails_naming_the_scenario(
    pytester: pytest.Pytester, llama_url: str, adder: str, fault: Fault, scenario: str
) -> None:
    """The proxy alters the last token of the second request for a prompt (the first through
    the cache: shared-prefix), or of a later turn sent through the cache (multi-turn)."""
    with FaultyProxy(llama_url, fault) as proxy:
        result = run(pytester, proxy.url, adder, prompts=ADDITION[:1])
    assert proxy.altered >= 1
    result.assert_outcomes(passed=0, failed=2)
    record = scenarios(records(pytester)["s01"])
    failed = [name for name, s in record.items() if s["match"] is False]
    # A repeat is also the second sighting of the multi-turn's second turn; a later turn
    # only that second turn.
    assert failed == (["shared-prefix", "multi-turn"] if fault.perturb_repeat else [scenario])
    if scenario == "shared-prefix":
        # s01's reference "46" is [55, 57, 2]; the proxy swapped the last content token:
        # the first divergence is token 1, where the runner-up is decisive on the adder.
        assert record[scenario]["first_divergence"] == 1
        result.stdout.fnmatch_lines(
            ["*shared-prefix: output differs from the reference, decisive at token 1 *"]
        )
    else:
        result.stdout.fnmatch_lines(["*multi-turn: output differs from the reference, *"])


LONG = (
    "Read the passage and answer the question at its end. The river rises in the hills, "
    "runs past three villages and a mill, and reaches the sea after forty miles; its water "
    "is cold in spring and warm by late summer, and the mill has ground grain for two "
    "hundred years. "
)


@pytest.mark.xdist_group("vllm")
def test_vllm_prefix_cache_is_identical_to_a_salted_request(
    pytester: pytest.Pytester, realistic_qwen2: Any, vllm_qwen2: str
) -> None:
    """The shared float32 vLLM (prefix caching on by default): every scenario equals the
    unique-``cache_salt`` reference token for token. The shared server runs without
    ``--enable-prompt-tokens-details``, so its hits are ``unreported``; its 1 GiB KV cache
    is far above ``max_eviction_prompts`` prompts: eviction is not exercised, and says so."""
    prompts = [
        ("v01", LONG * 3 + "Where does the river end?", ""),
        ("v02", LONG * 3 + "How old is the mill?", ""),
    ]
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(
        ".jsonl",
        addition="\n".join(
            json.dumps({"id": i, "prompt": p, "max_tokens": 8}) for i, p, _ in prompts
        ),
    )
    model = realistic_qwen2.path
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  q: {{path: '{model}'}}\n"
        f"backends:\n  srv: {{kind: vllm, url: '{vllm_qwen2}', chat: false}}\n"
        "suites: [addition.jsonl]\nchecks:\n  - cache-parity: {target: q@srv}\n"
        "    logprob_tolerance: 0.0\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json", "-rA"
    )
    print(result.stdout.str()[-4000:])
    result.assert_outcomes(passed=3)
    record = scenarios(records(pytester)["v01"])
    assert records(pytester)["v01"]["reference_kind"] == "uncached"
    assert not record["eviction"]["exercised"]
    assert "max_eviction_prompts" in record["eviction"]["note"]
    compared = [s for s in record.values() if s["exercised"]]
    assert all(s["match"] and s["max_logprob_diff"] == 0.0 for s in compared)
