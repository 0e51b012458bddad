"""cache-parity on mlx_lm.server and vllm-mlx: servers with no way around their cache, so each
prompt's reference is sent before any scenario's request of the check
(``reference_kind: first-request``) and shown cold by the cached tokens the engine reports
(mlx_lm.server) or by that order (vllm-mlx, which reports none). Two conversations of the
bundled ``multi-turn`` suite (mt001 given turns, mt015 ``generate`` turns: no cold reference
on these servers, not exercised) and single-turn prompts go as chat messages, rendered by the
server with the realistic Qwen2's own template, or as raw text. Faithful servers pass every
scenario they can set up against a cold reference; mlx_lm.server's chat references after the
first reuse the template's opening that every chat prompt shares (fewer cached tokens than
on their prompt served whole: cold for their own prompt, said on the item); a faulty proxy
that alters a repeated request, or every warm request alike, fails the check naming the
scenario.

Measured (mlx-lm 0.32.2's mlx_lm.server; vllm-mlx 0.6.0 with its pinned mlx-lm 0.31.3):

- mlx_lm.server reports ``usage.prompt_tokens_details.cached_tokens`` on every answer. Its
  LRU prompt cache keeps 10 prompts by default, so the reference's own entry would serve
  every later scenario whole; started with ``--prompt-cache-size 1`` each scenario is served
  from the state it sets up (a later turn from the earlier turns, the prompt after a sibling
  from their shared prefix), and any other prompt evicts it: eviction is exercised.
- vllm-mlx's ``usage`` has no cached tokens (hits ``unreported``); its simple engine reuses
  a system turn's KV state on streamed chat requests (the backend's cached path streams),
  counted server-wide in ``/v1/cache/stats``. One request at a time: ``concurrent`` is not
  exercised; ``--continuous-batching`` never stores into its prefix cache on this mlx-lm.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore  # noqa: F401  (see fresh_mlx_server)
import httpx
import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.conftest import _running_with_env
from tests.integration.test_cache_parity_servers import conversation_suite, records, scenarios
from tests.plugin.conftest import INI

COMPARED = ("shared-prefix", "exact-repeat", "multi-turn")


@pytest.fixture(scope="module")
def qwen2_mlx_server(
    realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """mlx_lm.server on the realistic Qwen2 folder (``model`` in requests is the served
    path) holding one prompt in its cache (``--prompt-cache-size 1``), started here so a
    faulty proxy can stand in front of it."""
    workdir = tmp_path_factory.mktemp("qwen2-mlx-server")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        model = ["--model", str(realistic_qwen2.path), "--prompt-cache-size", "1"]
        return [sys.executable, "-m", "mlx_lm", "server", *model, *host]

    with _running_with_env("mlx_lm.server", command, workdir, {"HF_HUB_CACHE": str(hub)}) as url:
        yield url


@pytest.fixture(scope="module")
def qwen2_vllm_mlx(
    vllm_mlx_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """vllm-mlx's simple engine on the realistic Qwen2 folder (concurrent requests wait for
    the lock), started here so a faulty proxy can stand in front of it."""
    workdir = tmp_path_factory.mktemp("qwen2-vllm-mlx")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(vllm_mlx_bin), "serve", str(realistic_qwen2.path), *host]

    env = {"HF_HUB_CACHE": str(hub), "VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait"}
    with _running_with_env("vllm-mlx", command, workdir, env) as url:
        yield url


@pytest.fixture
def fresh_mlx_server(
    realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """mlx_lm.server as :func:`qwen2_mlx_server`, started for one test: its prompt cache
    holds nothing of another test's requests. (httpcore is imported with this module: a
    pytester test drops the modules first imported during it, and httpx's health poll of
    the next server would then meet httpcore errors it no longer recognises.)"""
    workdir = tmp_path_factory.mktemp("qwen2-mlx-fresh")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        model = ["--model", str(realistic_qwen2.path), "--prompt-cache-size", "1"]
        return [sys.executable, "-m", "mlx_lm", "server", *model, *host]

    with _running_with_env("mlx_lm.server", command, workdir, {"HF_HUB_CACHE": str(hub)}) as url:
        yield url


def run(
    pytester: pytest.Pytester,
    url: str,
    kind: str,
    model: Any,
    suite: str,
    options: str = "",
    backend: str = "",
) -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", conv=suite)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  q: {{path: '{model.path}'}}\n"
        f"backends:\n  srv: {{kind: {kind}, url: '{url}'{chat(backend)}{backend}}}\n"
        f"suites: [conv.jsonl]\nchecks:\n  - cache-parity: {{target: q@srv{options}}}\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json", "-rA"
    )


def chat(backend: str) -> str:
    """``, chat: true`` unless the backend line says otherwise."""
    return "" if "chat:" in backend else ", chat: true"


SUITE = conversation_suite(["mt001", "mt015"], singles=2)
NAMES = ("mt001", "mt015", "single0", "single1")
MLX_SERVER = ", logprobs: false"
"""mlx_lm.server's top-k logprobs are unsorted and their chosen entry is not the generated
token (tests/integration/test_mlx_server_logprobs.py): a finding of its own that would fail
every item here, so its outputs are compared by text."""
EVICTION = ", eviction_tokens: 256"
"""One cached prompt (``--prompt-cache-size 1``): any other prompt evicts it; 256 tokens
makes the check send a few prompts of each conversation's length."""


def test_mlx_lm_server_chat_references_are_cold_for_their_own_prompt(
    pytester: pytest.Pytester, fresh_mlx_server: str, realistic_qwen2: Any
) -> None:
    """On a fresh server, mt001's reference is its first request: 0 cached tokens, and every
    scenario equals it with the hits the server reports. Its LRU prompt cache serves the
    longest prefix any cached prompt shares, so every later chat reference reuses the chat
    template's opening that the one before it left there: fewer tokens than the server
    reports on that prompt served whole, so cold for its own prompt, and the item says so.
    mt015's generate turns go through the cache before its last turn: no cold reference,
    not exercised (known before any request)."""
    result = run(pytester, fresh_mlx_server, "openai", realistic_qwen2, SUITE, EVICTION, MLX_SERVER)
    result.assert_outcomes(passed=5)
    items = records(pytester)
    for name in NAMES:
        assert items[name]["reference_kind"] == "first-request", name
        s = scenarios(items[name])
        compared = [r for r in s.values() if r["exercised"]]
        assert all(
            r["match"] and r["hit"] == "hit" for r in compared if r["scenario"] != "eviction"
        )
    assert items["mt001"]["reference_cached_tokens"] == 0
    assert items["mt001"]["reference_cold"] == "the reference sent first, 0 cached tokens reported"
    # "<|im_start|>system\nYou are a" (5 tokens) is shared by mt001's system turn and Qwen's
    # default one; single1 shares single0's whole default system turn and "<|im_start|>user\n";
    # served whole (sent twice more), the server reports all but the last prompt token.
    for name, shared, whole in (("single0", 5, 31), ("single1", 24, 32)):
        assert items[name]["reference_cached_tokens"] == shared, name
        assert items[name]["reference_cold"] == (
            f"the reference sent first, {shared} cached tokens reported, fewer than the {whole} "
            "on its prompt served whole: only a prefix it shares with prompts sent before it "
            "(the engine has no uncached request)"
        )
    assert not any(r["exercised"] for r in items["mt015"]["scenarios"])
    assert "generate turns go through its cache" in items["mt015"]["scenarios"][0]["note"]
    cached = {k: r["cached_tokens"] for k, r in scenarios(items["mt001"]).items()}
    # mt001 is 113 prompt tokens: the exact repeat reuses all but the last; the later turn
    # reuses [system, user 1] (49, as llama-server's slot), the sibling 3/4 of the text;
    # after 4 prompts of its length only the template's opening is still shared (5).
    assert cached == {
        "shared-prefix": 102,
        "exact-repeat": 112,
        "multi-turn": 49,
        "eviction": 5,
        "concurrent": 112,
    }
    assert scenarios(items["mt001"])["eviction"]["note"] == (
        "after 4 prompts of 67 tokens (capacity 256)"
    )
    # A single prompt of 3-4 tokens would need 65-86 fillers: not exercised, and says so; its
    # multi-turn would need a cold reference of a composed conversation: not exercised.
    single = scenarios(items["single0"])
    assert "max_eviction_prompts" in single["eviction"]["note"]
    assert "needs the composed conversation's own cold reference" in single["multi-turn"]["note"]


RAW = ", chat: false, logprobs: false"
WORDS = conversation_suite([], singles=3)
"""``Say hello.``, ``Name a colour.``, ``Count to three.``: sent as raw text (Qwen2 adds no
BOS), no two share a first token."""


def test_mlx_lm_server_raw_text_references_are_cold_and_every_scenario_identical(
    pytester: pytest.Pytester, fresh_mlx_server: str, realistic_qwen2: Any
) -> None:
    """As raw text, prompts that share no first token share nothing in the cache: each
    reference, sent before any scenario's request, is reported with 0 cached tokens (cold),
    and every scenario equals it. Raw text renders no conversation: multi-turn is not
    exercised."""
    result = run(
        pytester, fresh_mlx_server, "openai", realistic_qwen2, WORDS, ", eviction_tokens: 8", RAW
    )
    result.assert_outcomes(passed=4)
    items = records(pytester)
    for name in ("single0", "single1", "single2"):
        record = items[name]
        assert record["reference_cached_tokens"] == 0, name
        assert record["reference_cold"] == "the reference sent first, 0 cached tokens reported"
        s = scenarios(record)
        assert [k for k, r in s.items() if r["exercised"]] == [
            "shared-prefix",
            "exact-repeat",
            "eviction",
            "concurrent",
        ], name
        assert all(r["match"] for r in s.values() if r["exercised"]), name
        assert "renders no conversation" in s["multi-turn"]["note"], name
        # the eviction prompts ("0 .olleh yaS", ...) share nothing with it: a miss
        assert s["eviction"]["cached_tokens"] == 0, name
        assert s["exact-repeat"]["hit"] == "hit", name


def system_hits(url: str) -> int:
    """vllm-mlx's server-wide count of system-prompt KV cache hits (``/v1/cache/stats``)."""
    stats = httpx.get(f"{url}/v1/cache/stats", timeout=10).json()
    hits: int = stats["engine_cache"]["system_kv_cache"]["counters"]["hits"]
    return hits


def test_vllm_mlx_cache_is_identical_to_the_first_request(
    pytester: pytest.Pytester, qwen2_vllm_mlx: str, realistic_qwen2: Any
) -> None:
    """Every scenario it can set up equals the reference, sent before any scenario's request
    (vllm-mlx reports no cached tokens: the item says it was sent first); the hits are
    unreported per request, and the server's own counter shows the cache was used."""
    before = system_hits(qwen2_vllm_mlx)
    result = run(pytester, qwen2_vllm_mlx, "vllm-mlx", realistic_qwen2, SUITE)
    result.assert_outcomes(passed=5)
    items = records(pytester)
    compared = {
        "mt001": ["shared-prefix", "exact-repeat", "multi-turn"],
        "mt015": [],
        "single0": ["shared-prefix", "exact-repeat"],
        "single1": ["shared-prefix", "exact-repeat"],
    }
    for name in NAMES:
        assert items[name]["reference_kind"] == "first-request", name
        s = scenarios(items[name])
        assert [k for k, r in s.items() if r["exercised"]] == compared[name], name
        assert all(s[k]["match"] and s[k]["hit"] == "unreported" for k in compared[name]), name
        if name != "mt015":
            assert items[name]["reference_cold"] == (
                "the reference sent first, no cached-token count reported"
            )
            assert s["concurrent"]["note"] == "the backend takes one request at a time"
            assert "capacity is not known" in s["eviction"]["note"]
    # mt015's generate turns go through the cache before its last turn: no cold reference
    assert (
        "generate turns go through its cache" in scenarios(items["mt015"])["shared-prefix"]["note"]
    )
    result.stdout.fnmatch_lines(["*cache-parity(q)*4/4*first-request*0*13*PASS*"])
    # 5 hits for mt001, the one conversation with a system turn compared (shared-prefix 2,
    # exact-repeat 1, multi-turn 2; its reference stored it); the single prompts have none
    # (Qwen's default system turn comes from the template, not the messages).
    assert system_hits(qwen2_vllm_mlx) - before == 5


def assert_repeat_fault_fails_shared_prefix(
    pytester: pytest.Pytester, url: str, kind: str, model: Any, backend: str = ""
) -> None:
    """The proxy alters the second request for mt001: after its first request (the
    reference) that is shared-prefix's, which fails; the exact repeat (3rd) stays identical."""
    suite = conversation_suite(["mt001"])
    options = ", scenarios: [shared-prefix, exact-repeat]"
    with FaultyProxy(url, Fault(perturb_repeat=True)) as proxy:
        result = run(pytester, proxy.url, kind, model, suite, options, backend)
    assert proxy.altered == 1
    result.assert_outcomes(passed=0, failed=2)
    s = scenarios(records(pytester)["mt001"])
    assert s["shared-prefix"]["match"] is False
    assert s["exact-repeat"]["match"] is True
    result.stdout.fnmatch_lines(["*shared-prefix: output differs from the reference, *"])


def test_mlx_lm_server_cache_that_changes_a_repeat_fails_naming_the_scenario(
    pytester: pytest.Pytester, qwen2_mlx_server: str, realistic_qwen2: Any
) -> None:
    assert_repeat_fault_fails_shared_prefix(
        pytester, qwen2_mlx_server, "openai", realistic_qwen2, MLX_SERVER
    )


def test_vllm_mlx_cache_that_changes_a_repeat_fails_naming_the_scenario(
    pytester: pytest.Pytester, qwen2_vllm_mlx: str, realistic_qwen2: Any
) -> None:
    assert_repeat_fault_fails_shared_prefix(pytester, qwen2_vllm_mlx, "vllm-mlx", realistic_qwen2)


def test_a_cache_that_changes_every_hit_alike_fails_against_a_cold_reference(
    pytester: pytest.Pytester, fresh_mlx_server: str, realistic_qwen2: Any
) -> None:
    """The proxy alters every warm request (a prompt seen or extended before, through the
    cache) the same way: a cache that corrupts every hit alike. Each reference is sent before
    any scenario's request, so it is the prompt's first sight and stays intact, and every
    scenario differs from it. Before the fix single1's "first request" came after
    single0's multi-turn had sent single1 as its first turn: a hit, altered like every
    scenario of single1, which all matched it, and single1 passed (run against main's
    code: ``single0`` failed, ``single1`` passed)."""
    suite = conversation_suite([], singles=2)
    with FaultyProxy(fresh_mlx_server, Fault(perturb_warm=True)) as proxy:
        result = run(pytester, proxy.url, "openai", realistic_qwen2, suite, "", MLX_SERVER)
    assert proxy.altered > 0
    items = records(pytester)
    outcomes = {
        item["name"]: item["outcome"]
        for item in json.loads((pytester.path / "results.json").read_text())["items"]
    }
    assert outcomes == {"single0": "failed", "single1": "failed", "aggregate": "failed"}
    for name in ("single0", "single1"):
        s = scenarios(items[name])
        assert [k for k, r in s.items() if r["exercised"]] == [
            "shared-prefix",
            "exact-repeat",
            "concurrent",
        ], name
        # every hit differs from the reference in its last character, the same way
        assert all(s[k]["match"] is False for k in ("shared-prefix", "exact-repeat")), name
        assert s["exact-repeat"]["text"][:-1] == items[name]["reference_text"][:-1], name
        assert s["exact-repeat"]["text"] != items[name]["reference_text"], name
    # single1's reference, sent second, reuses only the template's opening that single0's
    # left in the cache (fewer tokens than on its prompt served whole): cold for its prompt.
    assert items["single0"]["reference_cached_tokens"] == 0
    assert "fewer than the" in items["single1"]["reference_cold"]
    result.stdout.fnmatch_lines(
        ["FAILED *::single1 - shared-prefix: output differs from the reference, first at char *"]
    )
