"""stream-parity and endpoint-parity on real servers, and on faulty proxies in front of them.

- llama-server (f32 GGUF, a chat template file): the native ``/completion`` streamed and not
  give the same token ids and logprobs; ``/v1/completions`` with the template rendered by
  ``/apply-template``, ``/v1/chat/completions`` and ``/v1/messages`` give the same text.
- vllm-mlx (simple and continuous-batching engines) and mlx_lm.server, started by the
  plugin: streamed and not give the same text; vllm-mlx's three endpoints agree on a copy of
  the adder with a chat template (without one its chat endpoints answer HTTP 500), and it
  survives the hostile requests of cache-pollution unchanged (``max_tokens: 0``: HTTP 422).
- A proxy that drops the 2nd content chunk of every stream fails stream-parity; one that
  alters every chat completion fails endpoint-parity; one that refuses (4xx) or fails (5xx)
  every stream fails each stream-parity item with its words, one that answers 404 makes
  streaming unsupported (the probe's finding).
- ``fail_on: decisive`` waives a near-tie only once what follows it was judged (a wrapped
  llama-server whose streamed path parts at a near-tie, then reproduces the rest or loops).
- Sharded: both kinds' aggregates merged from shards 1/2 and 2/2 (``merge_results``) are the
  unsharded run's, verdict and numbers, as is ``summarize`` of the unsharded run's records.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends.base import Backend, Generation, GenerationParams, PromptInput
from pytest_infercheck.report.merge import merge_results
from pytest_infercheck.report.results import load_results
from pytest_infercheck.verdict.conduct import Abilities
from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import chat_model, llama_at, mlx_lm_backend, vllm_backends
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, junit_properties, suite_jsonl
from tests.resummarize import aggregates, assert_same_aggregate, resummarized

PROMPTS = ADDITION[:4]


def write_project(
    pytester: pytest.Pytester,
    backends: str,
    checks: str,
    model: str,
    prompts: list[tuple[str, str, str]] = PROMPTS,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(prompts))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\nbackends:\n{backends}\n"
        f"suites: [addition.jsonl]\nchecks:\n{checks}\n",
    )


def run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, str]]]:
    result = pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")
    return result, junit_properties(pytester.path / "out.xml")


LLAMA_CHECKS = """\
  - stream-parity: adder@llama
  - endpoint-parity: {target: adder@llama, endpoints: [completions, chat, messages]}"""


def test_parity_passes_on_llama_server(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    write_project(pytester, llama_at(llama_url), LLAMA_CHECKS, adder)
    result, props = run(pytester)
    assert result.parseoutcomes() == {"passed": 4 + 1 + 8 + 1}, result.stdout.str()
    assert props["s01"]["infercheck_match"] == "True"
    assert props["s01[messages]"]["infercheck_similarity"] == "1.0"
    assert "streamed vs not" in result.stdout.str()


def test_stream_parity_fails_when_a_chunk_is_dropped(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    with FaultyProxy(llama_url, Fault(drop_stream_chunk=True)) as proxy:
        write_project(pytester, llama_at(proxy.url), "  - stream-parity: adder@llama", adder)
        result, props = run(pytester)
    # every answer of these prompts has two digits, so its 2nd content chunk is a digit
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    assert props["s01"]["infercheck_first_divergence"] == "1"
    assert "the streamed output differs from the non-streamed one" in result.stdout.str()


def test_endpoint_parity_fails_when_one_endpoint_is_altered(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    chat = frozenset({"/v1/chat/completions"})
    with FaultyProxy(llama_url, Fault(alter_paths=chat)) as proxy:
        checks = "  - endpoint-parity: {target: adder@llama, endpoints: [completions, chat]}"
        write_project(pytester, llama_at(proxy.url), checks, adder)
        result, props = run(pytester)
        # the generation-paths probe's chat request (a check probes only the topics it
        # uses: no structured probe), then each prompt's
        assert proxy.altered == 1 + len(PROMPTS)
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    assert props["s01[chat]"]["infercheck_match"] == "False"


def run_with_results(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, Any]]:
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    doc = load_results(pytester.path / "r.json")
    return result, {item["name"]: item for item in doc["items"]}


@pytest.mark.parametrize("status", [400, 500])
def test_a_refused_or_failed_stream_fails_every_item_naming_the_servers_message(
    pytester: pytest.Pytester, llama_url: str, adder: str, status: int
) -> None:
    """Every streamed request refused (4xx) or failed (5xx) by a proxy in front of a real
    llama-server: the probe's streamed request is refused too, which is no proof that the
    server lacks streaming, so each prompt's streamed request is made, and each item fails
    with the server's words; the aggregate names them. (Before the facets, the items failed
    as well, each with the backend's exception.)"""
    with FaultyProxy(llama_url, Fault(refuse_streams=status)) as proxy:
        write_project(pytester, llama_at(proxy.url), "  - stream-parity: adder@llama", adder)
        result, items = run_with_results(pytester)
        # the generation-paths probe's streamed request (a check probes only the topics it
        # uses: no structured probe), then one per prompt
        assert proxy.altered == 1 + len(PROMPTS)
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    said = (
        f"adder@llama: the streamed request failed: HTTP {status}: faulty proxy: streaming refused"
    )
    for prompt_id, _, _ in PROMPTS:
        assert items[prompt_id]["violations"] == [said], prompt_id
        assert items[prompt_id]["role"] == "incomplete"
        assert items[prompt_id]["data"]["failures"] == [said]
    names = ", ".join(f"{i} ({said})" for i, _, _ in PROMPTS)
    assert items["aggregate"]["violations"] == [f"4 of 4 items failed: {names}"]
    assert items["aggregate"]["data"]["n_failed"] == 4


def test_a_stream_path_the_probe_found_lacking_is_unsupported(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    """A proxy answering 404 to every streamed request while the server answers the rest:
    the probe finds streaming lacking, no streamed request is made, and each item says it is
    unsupported and compares nothing (it passes: the target does not offer the path)."""
    with FaultyProxy(llama_url, Fault(refuse_streams=404)) as proxy:
        write_project(pytester, llama_at(proxy.url), "  - stream-parity: adder@llama", adder)
        result, items = run_with_results(pytester)
        # the generation-paths probe's streamed request only (no structured probe)
        assert proxy.altered == 1
    assert result.parseoutcomes() == {"passed": 4 + 1}, result.stdout.str()
    lacking = (
        'a streamed request: HTTP 404: {"error": {"code": 404, "message": "faulty proxy: '
        'streaming refused"}}'
    )
    assert items["s01"]["data"]["unsupported"] == [
        f"the streamed request: unsupported (streaming not offered: {lacking})"
    ]
    assert items["aggregate"]["data"]["unsupported"] == [i for i, _, _ in PROMPTS]


HALF = -0.6932
"""A logprob near log(1/2)."""


class NearTieStream(Backend):
    """A llama-server backend whose streamed path parts from its non-streamed one at a
    near-tie at token 0: the reference's runner-up there (from its own top-k) is given a
    logprob 0.001 below the chosen token's, and the streamed output takes it, with margins
    0.001 (reference) and 0.0003 (streamed): both within the default ``tie_margin`` 0.01.
    Continued from the reference's tokens (a streamed request with more prompt ids), the
    streamed path is the real server's (``faithful``) or a loop of that runner-up token
    (``degenerate``): the fault ``fail_on: decisive`` must not hide."""

    def __init__(self, inner: Backend, mode: str, name: str) -> None:
        super().__init__(name)
        self.inner, self.mode, self.kind = inner, mode, inner.kind
        self.capabilities, self.concurrency = inner.capabilities, inner.concurrency
        self.references: dict[tuple[int, ...], Generation] = {}

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return await self.inner.render(user_text, system, thinking)

    async def ensure_ready(self) -> None:
        await self.inner.ensure_ready()

    async def probe_abilities(self, topic: str) -> Abilities:
        return await self.inner.probe_abilities(topic)

    def identity(self) -> dict[str, Any]:
        return self.inner.identity()

    async def aclose(self) -> None:
        await self.inner.aclose()

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        real = await self.inner.generate(prompt, params)
        assert real.token_ids and real.chosen_logprobs and real.top_logprobs
        runner_up = next(t for t in real.top_logprobs[0] if t != real.token_ids[0])
        # a near-even split of the mass, so the top-k still normalises
        top = [{real.token_ids[0]: HALF, runner_up: HALF - 0.001}, *real.top_logprobs[1:]]
        chosen = [HALF, *real.chosen_logprobs[1:]]
        reference = dataclasses.replace(real, top_logprobs=top, chosen_logprobs=chosen)
        self.references[tuple(prompt.token_ids or ())] = reference
        return reference

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        reference = self.references.get(tuple(prompt.token_ids or ()))
        if reference is not None:  # the item's own streamed request: the near-tie
            assert reference.token_ids and reference.chosen_logprobs and reference.top_logprobs
            own, other = reference.token_ids[0], runner_up_of(reference)
            lp = reference.chosen_logprobs[0]
            return dataclasses.replace(
                reference,
                text="?" + reference.text[1:],
                token_ids=[other, *reference.token_ids[1:]],
                chosen_logprobs=[lp - 0.0005, *reference.chosen_logprobs[1:]],
                top_logprobs=[{other: lp - 0.0005, own: lp - 0.0008}, *reference.top_logprobs[1:]],
                token_texts=None,
            )
        real = await self.inner.generate_stream(prompt, params)
        if self.mode == "faithful" or not real.token_ids:
            return real
        loop = max(1, len(real.token_ids))
        token = real.token_ids[0] + 1
        return dataclasses.replace(
            real,
            text="?" * loop,
            token_ids=[token] * loop,
            chosen_logprobs=[-0.01] * loop,
            top_logprobs=[{token: -0.01}] * loop,
            token_texts=None,
        )


def runner_up_of(reference: Generation) -> int:
    assert reference.top_logprobs and reference.token_ids
    return next(t for t in reference.top_logprobs[0] if t != reference.token_ids[0])


def pytest_infercheck_wrap_backend(backend: Backend, name: str, spec: Any) -> Backend | None:
    """Wrap the backends named ``tie-faithful`` and ``tie-degenerate``."""
    mode = name.removeprefix("tie-")
    return NearTieStream(backend, mode, name) if mode in ("faithful", "degenerate") else None


@pytest.mark.parametrize("mode", ["faithful", "degenerate"])
def test_fail_on_decisive_waives_a_near_tie_only_once_what_follows_is_judged(
    pytester: pytest.Pytester, llama_url: str, adder: str, mode: str
) -> None:
    """A streamed path that parts at a near-tie at token 0 (:class:`NearTieStream`), under
    ``fail_on: decisive``: continued from the non-streamed tokens, the real server's
    streamed path reproduces the rest, and the waiver applies (each item passes, saying so);
    a streamed path that loops after the near-tie parts from them decisively, and each item
    fails naming where (before the facets, the near-tie alone waived it: every item
    passed)."""
    pytester.makeconftest(
        "from tests.integration.test_parity_servers import pytest_infercheck_wrap_backend  "
        "# noqa: F401\n"
    )
    backends = llama_at(llama_url).replace("  llama:", f"  tie-{mode}:")
    checks = f"  - stream-parity: adder@tie-{mode}\n    fail_on: decisive"
    write_project(pytester, backends, checks, adder)
    result, items = run_with_results(pytester)
    continued = (
        "the streamed path continued from the non-streamed tokens after the near-tie at token 0"
    )
    if mode == "faithful":
        assert result.parseoutcomes() == {"passed": 4 + 1}, result.stdout.str()
        for prompt_id, _, answer in PROMPTS:
            data = items[prompt_id]["data"]
            assert data["reference"]["text"] == answer and data["other"]["text"][0] == "?"
            assert data["tie"]["divergence_label"] == "near-tie"
            assert data["tie"]["margins"] == pytest.approx([0.001, 0.0003], abs=1e-6)
            assert data["after_tie"].startswith(f"{continued} reproduces its remaining ")
        return
    assert result.parseoutcomes() == {"failed": 4 + 1}, result.stdout.str()
    for prompt_id, _, _ in PROMPTS:
        violations = items[prompt_id]["violations"]
        assert violations[0].startswith("the streamed output differs from the non-streamed one")
        assert violations[1].startswith(f"{continued} parts from them: decisive at token 1 ")


def test_parity_passes_on_vllm_mlx_and_names_mlx_lm_servers_logprobs(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    vllm_mlx_bin: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = chat_model(tiny_models["bf16"], tmp_path_factory.mktemp("chat") / "adder-chat")
    hub = pytester.path / "hub"
    hub.mkdir()
    backends = vllm_backends(vllm_mlx_bin, hub) + mlx_lm_backend(hub)
    checks = """\
  - stream-parity: adder@vllm
  - stream-parity: adder@vllmcb
  - stream-parity: adder@mlxserver
  - endpoint-parity: {target: adder@vllm, endpoints: [completions, chat, messages]}
  - cache-pollution:
      target: adder@vllm
      hostile: [context-overflow, invalid-utf8, special-tokens, max-tokens-0]"""
    # Not the ``disconnect`` request: now and then (1 CI run of 3) vllm-mlx 0.6.0's simple
    # engine never finishes the stream whose client left after the first chunk, and every
    # later request waits on it until the client's timeout (120 s each: 20 minutes of a CI
    # run; docs/how-to/cache-pollution.md, "Measured").
    write_project(pytester, backends, checks, f"{{path: '{folder}'}}")
    result, props = run(pytester)
    # mlx_lm.server's streams equal its answers, but its negotiated top-k lists are unsorted
    # and their chosen entry is not the generated token
    # (tests/integration/test_mlx_server_logprobs.py): its 4 items and aggregate fail on it.
    outcomes = {"passed": 2 * (4 + 1) + 8 + 1 + 4 + 1, "failed": 4 + 1}
    assert result.parseoutcomes() == outcomes, result.stdout.str()
    assert "top-k logprobs not sorted in the non-streamed output" in result.stdout.str()
    assert props["s01[messages]"]["infercheck_similarity"] == "1.0"
    assert props["max-tokens-0"]["infercheck_alive"] == "True"

    # A logprob_tolerance written for vllm-mlx, which returns no logprobs, cannot be
    # measured: a collection error at the gate's line (its items passed before the facets,
    # then failed saying why; now known from the matrix alone).
    drift = "  - stream-parity: adder@vllm\n    logprob_tolerance: 0.0001"
    write_project(pytester, backends, drift, f"{{path: '{folder}'}}")
    refused = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    refused.stdout.fnmatch_lines(
        [
            "infercheck.yaml:*: checks[[]0[]].logprob_tolerance: not measured on any item: "
            "backend 'vllm' (vllm-mlx) returns no logprobs*"
        ]
    )
    assert refused.ret == pytest.ExitCode.INTERRUPTED


def run_sharded(pytester: pytest.Pytester) -> tuple[dict[str, Any], dict[str, Any]]:
    """The project run whole, then as shards 1/2 and 2/2 of one run id: ``(the unsharded
    results, the shards' merge by pytest_infercheck.report.merge.merge_results)``."""
    args = ("-q", "-p", "no:cacheprovider")
    pytester.runpytest_subprocess(*args, "--infercheck-results=whole.json")
    shards = []
    for index in (1, 2):
        run = pytester.runpytest_subprocess(
            *args,
            f"--infercheck-shard={index}/2",
            "--infercheck-run-id=parity-shards",
            f"--infercheck-results=s{index}.json",
        )
        run.stdout.fnmatch_lines([f"*suite gates deferred*(shard {index}/2)*"])
        shards.append((f"s{index}.json", load_results(pytester.path / f"s{index}.json")))
    (merged,), warnings = merge_results(shards)
    assert warnings == []
    return load_results(pytester.path / "whole.json"), merged


@pytest.mark.parametrize("fault", ["none", "dropped chunk"])
def test_parity_aggregates_merged_from_two_shards_are_the_unsharded_ones(
    pytester: pytest.Pytester, llama_url: str, adder: str, fault: str
) -> None:
    """Each aggregate (stream- and endpoint-parity, three endpoints) is ``summarize`` of its
    items' records: live, from the unsharded results file's records in either order, and
    from the union of two shards' records, with one verdict, the same violations and the
    same numbers; on a faithful server (passing) and behind a proxy that drops a chunk of
    every stream (stream-parity failing on every prompt). The 8 prompts of the suite: each
    check has items in both shards."""
    proxy = FaultyProxy(llama_url, Fault(drop_stream_chunk=fault == "dropped chunk"))
    with proxy:
        write_project(pytester, llama_at(proxy.url), LLAMA_CHECKS, adder, ADDITION)
        whole, merged = run_sharded(pytester)
    live, from_shards = aggregates(whole), aggregates(merged)
    assert set(live) == set(from_shards) and len(live) == 2
    for nodeid, aggregate in live.items():
        for reverse in (False, True):
            assert_same_aggregate(resummarized(whole, nodeid, reverse=reverse), aggregate)
        assert_same_aggregate(from_shards[nodeid], aggregate)
        assert from_shards[nodeid].get("gates_deferred_to") is None
    by_kind = {a["kind"]: a for a in live.values()}
    assert by_kind["endpoint-parity"]["outcome"] == "passed"
    assert by_kind["endpoint-parity"]["data"]["items"] == 16
    stream = by_kind["stream-parity"]
    if fault == "none":
        assert stream["outcome"] == "passed" and stream["data"]["n_match"] == 8
    else:
        assert stream["outcome"] == "failed" and stream["data"]["n_failed"] == 8
        # the stream asks for its usage (stream_options.include_usage), so the dropped
        # chunk shows first as a stream shorter than its own usage count says: a fault of
        # each item, which the aggregate also counts
        said, faults = stream["violations"]  # the framework names 5 items, each with its first
        assert said.startswith(
            "8 of 8 items failed: s01 (logprob count does not match the tokens in the "
            "streamed output: 2 logprobs for 3 generated tokens (usage.completion_tokens))"
        )
        assert said.endswith(", and 3 more")
        assert faults.startswith("logprob count does not match the tokens in 8 of 8 items")
    # the merge covers every item of the unsharded run, each in one shard
    items = {i["nodeid"] for i in merged["items"] if i["role"] != "aggregate"}
    assert items == {i["nodeid"] for i in whole["items"] if i["role"] != "aggregate"}
