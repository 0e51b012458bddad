"""The harness's own instruments, checked against values computed by hand: the toy model,
the fake engine (faithful by default: what it generates, scores and caches agrees), what each
fault of the space does to an answer, and the profile lookup."""

from __future__ import annotations

import asyncio
import dataclasses
import math
from collections.abc import Coroutine
from typing import Any, TypeVar

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_infercheck.backends import GenerationParams, PromptInput
from pytest_infercheck.backends.capabilities import CachedGeneration, UncachedGeneration
from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.checks.framework.harness import Blind, HarnessProfile
from pytest_infercheck.checks.registry import all_kinds, kind_named
from pytest_infercheck.structured.records import (
    ChatTurn,
    RequestFailed,
    StructuredChat,
    StructuredRequest,
)
from pytest_infercheck.tools import Tool

from . import toy
from .engine import Injector, LlamaToy, OpenAIToy, copied
from .faults import FAULT_KINDS, Fault, Request, applicable, faults
from .verdicts import NoProfile, faithful, observed, profile

T = TypeVar("T")
PARAMS = GenerationParams(max_tokens=8)
SUM = "<s>12+34="
SUM_IDS = [0, 21, 22, 15, 23, 24, 33]
"""``<s>`` is id 0; a character c is 4 + ord(c) - 32: '1' 21, '2' 22, '+' 15, '3' 23, '4'
24, '=' 33."""
ANSWER_IDS = [24, 26, 1]
"""'4' (24), '6' (26), then EOS (1)."""


def sync(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def raw(text: str) -> PromptInput:
    return PromptInput(text, tuple(toy.tokenize(text)), False)


def llama(fault: Fault | None = None, name: str = "sut") -> LlamaToy:
    return LlamaToy(name, Injector(fault), chat=True)


def request(path: str, key: str, occurrence: int = 0, **facts: Any) -> Request:
    return Request("sut", path, key, occurrence, **facts)


# -- the toy model ---------------------------------------------------------------------------
def test_the_vocabulary_and_a_sum() -> None:
    assert toy.V == 100
    assert toy.tokenize(SUM) == SUM_IDS
    assert toy.tokenize(SUM, parse_special=False)[:3] == [4 + 28, 4 + 83, 4 + 30]  # '<' 's' '>'
    assert toy.detokenize(SUM_IDS) == SUM
    ids, rows, stopped = toy.ToyModel().generate(SUM_IDS, 8)
    assert (ids, stopped) == (ANSWER_IDS, True)
    # the answer's margin: its logit is 9 plus noise in [0, 2), every other one below 2
    for row, token in zip(rows, ids, strict=True):
        assert abs(math.log(np.exp(row.astype(np.float64)).sum())) < 1e-6
        others = np.delete(row, token)
        assert row[token] - others.max() > toy.ANSWER_LOGIT - toy.NOISE
    ids, _, stopped = toy.ToyModel().generate(SUM_IDS, 2)
    assert (ids, stopped) == ([24, 26], False)


def test_a_word_depends_on_the_seed_only_through_the_prompt() -> None:
    prompt = toy.tokenize("<s>Name a colour:")
    words = {toy.detokenize(toy.ToyModel(seed).answer(prompt)) for seed in range(6)}
    assert len(words) > 1
    assert all(3 <= len(w) <= 7 and w.isalpha() for w in words)
    assert toy.ToyModel(3).answer(prompt) == toy.ToyModel(3).answer(prompt)


# -- the faithful engine -----------------------------------------------------------------------
def test_generation_scores_and_top_k_agree_exactly() -> None:
    engine = llama()
    g = sync(engine.generate(raw(SUM), PARAMS))
    assert (g.text, g.token_ids, g.finish_reason, g.cached_tokens) == ("46", ANSWER_IDS, "stop", 0)
    rows = sync(engine.score(SUM_IDS, ANSWER_IDS))
    assert rows.shape == (3, 100) and rows.dtype == np.float32
    assert g.chosen_logprobs == [float(rows[t, i]) for t, i in enumerate(ANSWER_IDS)]
    assert g.top_logprobs is not None
    for t, top in enumerate(g.top_logprobs):
        assert list(top) == list(np.argsort(-rows[t])[:5])
        assert list(top.values()) == sorted(top.values(), reverse=True)
    top_k = sync(engine.score_top_k(SUM_IDS, ANSWER_IDS))
    assert [r.chosen for r in top_k] == g.chosen_logprobs
    streamed = sync(engine.generate_stream(raw(SUM), PARAMS))
    assert (streamed.token_ids, streamed.chosen_logprobs) == (g.token_ids, g.chosen_logprobs)
    assert sync(engine.generate_via("chat", raw("12+34="), PARAMS)).text == "46"


def test_the_prompt_cache_reports_the_prefix_it_reuses() -> None:
    engine = llama()
    assert isinstance(engine, CachedGeneration) and isinstance(engine, UncachedGeneration)
    assert not isinstance(OpenAIToy("x", Injector()), UncachedGeneration)
    first = sync(engine.render("12+34=", None, False))
    sibling = sync(engine.render("12+35=", None, False))
    assert first.text == "<s><|user|>12+34=\n<|assistant|>"
    # "<s>" 1 id, "<|user|>" 8, "12+34=" 6, "\n" 1, "<|assistant|>" 13
    assert first.token_ids is not None and len(first.token_ids) == 29
    assert sync(engine.generate_uncached(first, PARAMS)).cached_tokens == 0
    assert sync(engine.generate_cached(first, PARAMS)).cached_tokens == 0  # uncached kept none
    # "<s>" and "<|user|>12+3": 13 shared ids
    assert sync(engine.generate_cached(sibling, PARAMS)).cached_tokens == 13
    assert sync(engine.generate_cached(first, PARAMS)).cached_tokens == 28  # all but the last
    assert sync(engine.generate(first, PARAMS)).cached_tokens == 0  # cache_prompt: false


def test_structured_paths_answer_alike() -> None:
    engine = llama()
    assert isinstance(engine, StructuredChat)
    add = Tool("add", {"type": "object", "properties": {"a": {"type": "integer"}}})
    req = StructuredRequest((ChatTurn("user", "add 12 and 34"),), 16, tools=(add,))
    answers = [sync(engine.structured(req, path)) for path in engine.structured_paths()]
    calls = {a.choices[0].calls[0].call.canonical() for a in answers}
    assert calls == {'{"arguments":{"a":12},"name":"add"}'}
    assert [len(a.choices) for a in answers] == [1, 1, 2, 1, 1]  # chat-n2 answers two


# -- what each fault does ------------------------------------------------------------------------
def test_a_changed_token_is_the_best_alternative_with_its_own_logprob() -> None:
    key = raw(SUM).key()
    engine = llama(Fault("changed-token", request("generate", key), position=1))
    g = sync(engine.generate(raw(SUM), PARAMS))
    row = toy.ToyModel().row(SUM_IDS, [24])
    alternative = int(np.argsort(-row)[1])
    assert g.token_ids == [24, alternative, 1]
    assert g.text == "4" + toy.VOCAB[alternative]
    assert g.chosen_logprobs is not None and g.chosen_logprobs[1] == float(row[alternative])
    assert engine.injector.applied == [
        f"changed-token on generate request #0 of sut for {key} (position 1)"
    ]
    # the next request of the same prompt is intact
    assert sync(engine.generate(raw(SUM), PARAMS)).token_ids == ANSWER_IDS


@pytest.mark.parametrize(("kind", "value"), [("nan", "nan"), ("inf", "inf")])
def test_a_non_finite_logprob(kind: str, value: str) -> None:
    engine = llama(Fault(kind, request("generate", raw(SUM).key()), position=0))
    g = sync(engine.generate(raw(SUM), PARAMS))
    assert g.token_ids == ANSWER_IDS and g.chosen_logprobs is not None and g.top_logprobs
    assert str(g.chosen_logprobs[0]) == value and str(g.top_logprobs[0][24]) == value
    # changed in place, and seen as changed: the answer kept before the fault is a copy
    assert engine.injector.applied == [
        f"{kind} on generate request #0 of sut for {raw(SUM).key()} (position 0)"
    ]
    rows_fault = Fault(kind, request("score", f"r{toy.stable_hash(SUM_IDS, ANSWER_IDS):08x}"))
    rows = sync(llama(rows_fault).score(SUM_IDS, ANSWER_IDS))
    assert str(rows[0, 0]) == value and np.isfinite(rows[1:]).all()


def test_a_copied_answer_shares_nothing_a_fault_changes() -> None:
    g = sync(llama().generate(raw(SUM), PARAMS))
    g.others = (dataclasses.replace(g),)
    c = copied(g)
    assert c == g and c.others == g.others
    assert c.token_ids is not None and c.chosen_logprobs is not None and c.top_logprobs
    c.token_ids[0], c.chosen_logprobs[0] = 99, math.nan
    c.top_logprobs[0][24] = math.inf
    c.others[0].top_logprobs[0][24] = math.inf  # type: ignore[index]
    assert g.token_ids == ANSWER_IDS and math.isfinite(g.chosen_logprobs[0])  # type: ignore[index]
    assert math.isfinite(g.top_logprobs[0][24]) and math.isfinite(g.others[0].top_logprobs[0][24])  # type: ignore[index]


def test_empty_truncated_missing_logprobs_and_another_prompts_answer() -> None:
    key = raw(SUM).key()
    empty = sync(llama(Fault("empty", request("generate", key))).generate(raw(SUM), PARAMS))
    assert (empty.text, empty.token_ids, empty.chosen_logprobs) == ("", [], [])
    cut = Fault("truncated", request("generate", key), position=1)
    g = sync(llama(cut).generate(raw(SUM), PARAMS))
    assert (g.text, g.token_ids, g.finish_reason) == ("4", [24], "stop")
    bare = sync(llama(Fault("no-logprobs", request("generate", key))).generate(raw(SUM), PARAMS))
    assert (bare.token_ids, bare.chosen_logprobs, bare.top_logprobs) == (ANSWER_IDS, None, None)
    engine = llama(Fault("duplicated", request("generate", key)))
    other = sync(engine.generate(raw("<s>40+35="), PARAMS))
    assert sync(engine.generate(raw(SUM), PARAMS)).text == other.text == "75"


def test_http_faults_raise_what_the_real_clients_raise() -> None:
    key = raw(SUM).key()
    engine = llama(Fault("http-5xx", request("generate", key), status=502))
    with pytest.raises(HttpError) as failed:
        sync(engine.generate(raw(SUM), PARAMS))
    assert failed.value.status == 502
    assert "HTTP 502: harness fault: http-5xx on generate" in str(failed.value)
    req = StructuredRequest((ChatTurn("user", "say hello"),), 8)
    engine = llama()
    sync(engine.structured(req, "chat-stream"))
    structured = engine.injector.log[-1]
    refused = Fault("http-4xx", structured, status=400)
    with pytest.raises(RequestFailed, match="HTTP 400") as caught:  # the client's reading
        sync(llama(refused).structured(req, "chat-stream"))
    assert caught.value.status == 400
    failing = Fault("http-5xx", structured, status=500)
    with pytest.raises(RequestFailed) as error:
        sync(llama(failing).structured(req, "chat-stream"))
    assert error.value.status == 500


def test_every_request_of_a_path_and_a_warm_reference() -> None:
    key = raw(SUM).key()
    every = Fault("truncated", request("generate", key), every=True, position=1)
    engine = llama(every)
    assert sync(engine.generate(raw("<s>40+35="), PARAMS)).text == "7"
    assert sync(engine.generate_stream(raw(SUM), PARAMS)).text == "46"  # another path
    warm = Fault("warm-reference", request("generate_uncached", key), variant="reported")
    g = sync(llama(warm).generate_uncached(raw(SUM), PARAMS))
    assert (g.text, g.cached_tokens) == ("46", len(SUM_IDS) - 1)
    corrupt = Fault(
        "warm-reference", request("generate_uncached", key), True, 0, variant="corrupted-cache"
    )
    engine = llama(corrupt)
    reference = sync(engine.generate_uncached(raw(SUM), PARAMS))
    sync(engine.generate_cached(raw(SUM), PARAMS))  # primes the cache
    hit = sync(engine.generate_cached(raw(SUM), PARAMS))
    assert reference.cached_tokens == hit.cached_tokens == len(SUM_IDS) - 1
    assert reference.token_ids == hit.token_ids != ANSWER_IDS  # corrupted alike


@given(st.data())
def test_a_drawn_fault_can_change_the_request_it_aims_at(data: st.DataObject) -> None:
    log = faithful("determinism", "llama-server", 0).log
    kind = data.draw(st.sampled_from([k for k in FAULT_KINDS if k != "warm-reference"]))
    fault = data.draw(faults(kind, log))
    assert fault.request in log and applicable(kind, fault.request)
    limit = fault.request.content if kind in ("changed-token", "truncated") else 0
    assert fault.position < max(limit, fault.request.positions, 1)
    assert (fault.status is not None) == kind.startswith("http-")


# -- profiles and what the harness reads -------------------------------------------------------
def test_every_kind_brings_its_own_profile_through_its_spec_facet() -> None:
    for kind in all_kinds():
        assert kind.spec.harness is not None, kind.name
        assert profile(kind.name) is kind.spec.harness


def test_a_kind_without_a_profile_fails_saying_what_to_add(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from tests.harness import verdicts

    kind = kind_named("stress")
    assert kind is not None and kind.spec.harness is not None  # stress brings its own
    bare = dataclasses.replace(kind, spec=dataclasses.replace(kind.spec, harness=None))
    monkeypatch.setattr(verdicts, "kind_named", lambda name: bare)
    with pytest.raises(NoProfile, match=r"stress: no harness profile: add `harness=Harness"):
        profile("stress")
    own = HarnessProfile({"stress": {"target": "{target}"}}, blind=(Blind("why", "empty"),))
    spec = dataclasses.replace(kind.spec, harness=own)
    monkeypatch.setattr(verdicts, "kind_named", lambda name: dataclasses.replace(kind, spec=spec))
    assert profile("stress") is own
    assert own.blind_to("empty", "generate", False, "openai") == "why"
    assert own.blind_to("nan", "generate", False, "openai") is None


def test_a_request_whose_answer_no_item_reads_is_unread() -> None:
    log = faithful("determinism", "llama-server", 0).log
    run1 = next(r for r in log if r.path == "generate" and r.occurrence == 1)
    assert observed("determinism", "llama-server", 0, run1)
    log = faithful("batch-invariance", "llama-server", 0).log
    batched = [r for r in log if r.path == "generate_batch"]
    seen = [observed("batch-invariance", "llama-server", 0, r) for r in batched]
    # each trial's batch of 3 holds one needle (read) and two companions (not read)
    assert (len(batched), seen.count(True)) == (9, 3)
