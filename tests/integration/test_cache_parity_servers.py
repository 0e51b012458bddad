"""cache-parity on real servers: faithful engines pass (or give what they really give), and
a faulty proxy that perturbs only a repeated request, or only later turns served from the
cache, fails the check naming the scenario and the first divergent token."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_flags, running
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
    assert all(s["match"] and s["max_logprob_diff"] == 0.0 for s in s01.values() if s["exercised"])
    # The adder is served as raw text (no chat): no conversation to render (later turns are
    # shown on the realistic Qwen2's chat template below).
    assert "renders no conversation (raw text" in s01["multi-turn"]["note"]
    # 8 prompts of 9 tokens filled the slot (64), and the prefix came back whole: llama.cpp's
    # host-RAM prompt cache (--cache-ram) restored it (a finding, shown on the item).
    assert s01["eviction"]["note"].startswith("after 8 prompts of 9 tokens (capacity 64)")
    assert s01["eviction"]["cached_tokens"] == 6


def test_a_cache_that_changes_a_repeat_fails_naming_the_scenario(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """The proxy alters the last token of the second request for a prompt: the first through
    the cache, shared-prefix's (later turns: on chat messages below)."""
    with FaultyProxy(llama_url, Fault(perturb_repeat=True)) as proxy:
        result = run(pytester, proxy.url, adder, prompts=ADDITION[:1])
    assert proxy.altered >= 1
    result.assert_outcomes(passed=0, failed=2)
    record = scenarios(records(pytester)["s01"])
    assert [name for name, s in record.items() if s["match"] is False] == ["shared-prefix"]
    # s01's reference "46" is [55, 57, 2]; the proxy swapped the last content token: the
    # first divergence is token 1, where the runner-up is decisive on the adder.
    assert record["shared-prefix"]["first_divergence"] == 1
    result.stdout.fnmatch_lines(
        ["*shared-prefix: output differs from the reference, decisive at token 1 *"]
    )


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
    """The shared float32 vLLM (prefix caching on by default, ``--enable-prompt-tokens-
    details``): every scenario equals the unique-``cache_salt`` reference token for token,
    with the hits ``usage.prompt_tokens_details.cached_tokens`` reports (``require_hits``);
    its 1 GiB KV cache is far above ``max_eviction_prompts`` prompts: eviction is
    not exercised, and says so."""
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
        f"backends:\n  srv: {{kind: vllm, url: '{vllm_qwen2}', chat: true}}\n"
        "suites: [addition.jsonl]\nchecks:\n  - cache-parity: {target: q@srv}\n"
        "    logprob_tolerance: 0.0\n    require_hits: true\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json", "-rA"
    )
    print(result.stdout.str()[-4000:])
    result.assert_outcomes(passed=3)
    items = records(pytester)
    record = scenarios(items["v01"])
    assert items["v01"]["reference_kind"] == "uncached"
    assert items["v01"]["reference_cached_tokens"] == 0  # a unique cache_salt: no hit
    assert not record["eviction"]["exercised"]
    assert "max_eviction_prompts" in record["eviction"]["note"]
    compared = [s for s in record.values() if s["exercised"]]
    assert all(s["match"] and s["max_logprob_diff"] == 0.0 for s in compared)
    # Measured: 128 cached tokens on every scenario of v01 (378 prompt tokens with the
    # template): vLLM's CPU build reuses whole blocks, and reports one block's worth here.
    assert {name: s["cached_tokens"] for name, s in record.items() if s["exercised"]} == {
        "shared-prefix": 128,
        "exact-repeat": 128,
        "multi-turn": 128,
        "concurrent": 128,
    }


def conversation_suite(ids: list[str], singles: int = 0) -> str:
    """The bundled ``multi-turn`` suite's lines ``ids`` and ``singles`` single-turn prompts."""
    lines = {
        json.loads(line)["id"]: line
        for line in (REPO / "suites" / "multi-turn.jsonl").read_text().splitlines()
    }
    words = ["Say hello.", "Name a colour.", "Count to three."]
    return "\n".join(
        [lines[i] for i in ids]
        + [
            json.dumps({"id": f"single{n}", "prompt": words[n], "max_tokens": 6})
            for n in range(singles)
        ]
    )


CHAT_CONTEXT = 512


@pytest.fixture(scope="module")
def qwen2_llama(
    llama_server_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Qwen2's GGUF with its own chat template (``--jinja``),
    exact f32, one slot of :data:`CHAT_CONTEXT` tokens and no host-RAM prompt cache
    (``--cache-ram 0``): a prefix pushed out of the slot is gone."""
    flags = [*llama_flags(slots=1, context=CHAT_CONTEXT).split(), "--cache-ram", "0", "--jinja"]

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(realistic_qwen2.gguf), *host, *flags]

    with running("llama-server", command, tmp_path_factory.mktemp("qwen2-llama")) as url:
        yield url


def run_conversations(
    pytester: pytest.Pytester,
    url: str,
    model: Any,
    suite: str,
    options: str = "",
    thresholds: str = "",
) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", conv=suite)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  q: {{path: '{model.path}', gguf: '{model.gguf}'}}\n"
        f"backends:\n  srv: {{kind: llama-server, url: '{url}', chat: true}}\n"
        f"suites: [conv.jsonl]\nchecks:\n  - cache-parity: {{target: q@srv{options}}}\n"
        f"    logprob_tolerance: 1.0e-4\n{thresholds}",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json", "-rA"
    )


def test_llama_server_later_turns_and_eviction_through_chat_messages(
    pytester: pytest.Pytester, qwen2_llama: str, realistic_qwen2: Any
) -> None:
    """Conversations of the bundled suite rendered by the server's own template
    (``/apply-template`` over every turn): each later turn served from the slot's cached
    earlier turns, and each prompt after one slot's worth of other prompts (no host-RAM cache
    to bring it back: really a miss), equal the ``cache_prompt: false`` reference exactly."""
    suite = conversation_suite(["mt001", "mt015"], singles=2)
    result = run_conversations(
        pytester, qwen2_llama, realistic_qwen2, suite, f", eviction_tokens: {CHAT_CONTEXT}"
    )
    result.assert_outcomes(passed=5)
    items = records(pytester)
    for name in ("mt001", "mt015", "single0", "single1"):
        s = scenarios(items[name])
        assert all(r["exercised"] and r["match"] for r in s.values()), name
        # Tokens identical; logprobs through the cache move by float32 steps (measured up to
        # 3.3e-6 on mt001's exact repeat), within the test's 1e-4 and never exactly 0.
        assert all(r["max_logprob_diff"] <= 1e-5 for r in s.values()), name
        assert s["exact-repeat"]["max_logprob_diff"] > 0.0
        assert s["multi-turn"]["hit"] == "hit", name
        # One slot of 512 tokens, --cache-ram 0: after a slot's worth of other prompts only
        # the chat template's opening (and, without a system turn, Qwen's default system
        # turn) is shared: the prompt's own prefix is gone, and the reference still holds.
        assert "the prefix was pushed out" in s["eviction"]["note"], name
    # A later turn reuses the earlier turns only (mt001 [s, u]: 49 tokens; mt015 [s, u, a,
    # u]: 116), less than the exact repeat (the whole prompt but its last token).
    for name, earlier in (("mt001", 49), ("mt015", 116)):
        s = scenarios(items[name])
        assert s["multi-turn"]["cached_tokens"] == earlier
        assert s["exact-repeat"]["cached_tokens"] > earlier
        assert s["eviction"]["cached_tokens"] == 5  # <|im_start|>system\nYou are a
    mt001 = scenarios(items["mt001"])
    assert mt001["multi-turn"]["note"] == "after turns 1-2 of 4 (user turn 1 of 2)"


def test_llama_server_later_turn_fault_fails_multi_turn_through_chat_messages(
    pytester: pytest.Pytester, qwen2_llama: str, realistic_qwen2: Any
) -> None:
    """The proxy alters a request sent through the cache whose prompt extends an earlier
    one (a later turn of real chat messages): multi-turn fails, the exact repeat (a prompt
    seen before, not an extension) stays identical."""
    suite = conversation_suite(["mt001"])
    with FaultyProxy(qwen2_llama, Fault(perturb_later_turns=True)) as proxy:
        result = run_conversations(
            pytester, proxy.url, realistic_qwen2, suite, ", scenarios: [exact-repeat, multi-turn]"
        )
    assert proxy.altered == 1
    result.assert_outcomes(passed=0, failed=2)
    s = scenarios(records(pytester)["mt001"])
    assert s["exact-repeat"]["match"] is True
    assert s["multi-turn"]["match"] is False
    result.stdout.fnmatch_lines(["*multi-turn: output differs from the reference, *"])


def test_a_warm_request_that_fails_fails_the_item_naming_the_servers_answer(
    pytester: pytest.Pytester, qwen2_llama: str, realistic_qwen2: Any
) -> None:
    """The proxy answers HTTP 500 to the second request of a prompt: for a single-turn
    prompt's multi-turn scenario (the prompt is its own first turn: the suite has no other)
    that is its first turn (the first request was its uncached reference). The item fails
    naming the server's answer, under ``require_hits: true`` too; the scenario is failed, not
    "not exercised". Before the fix the 500 (there on its first turn through the cache) made
    multi-turn "not exercised" and both items passed (run against main's code: ``passed=2``,
    ``multi-turn: not exercised: no conversation: backend 'srv': ... HTTP 500``)."""
    suite = conversation_suite([], singles=1)
    with FaultyProxy(qwen2_llama, Fault(fail_nth_of_prompt=2)) as proxy:
        result = run_conversations(
            pytester,
            proxy.url,
            realistic_qwen2,
            suite,
            ", scenarios: [multi-turn]",
            "    require_hits: true\n",
        )
    assert proxy.failed == 1
    result.assert_outcomes(passed=0, failed=2)
    multi = scenarios(records(pytester)["single0"])["multi-turn"]
    assert multi["exercised"] is True and multi["match"] is False
    said = "HTTP 500: faulty proxy: HTTP 500 on purpose"  # the server's words, from its body
    assert multi["error"] == f"multi-turn: the uncached first turn failed: {said}"
    result.stdout.fnmatch_lines(
        [
            f"*multi-turn: the uncached first turn failed: {said}",
            f"*1 of 1 items failed: single0 (multi-turn: the uncached first turn failed: {said})*",
        ]
    )
