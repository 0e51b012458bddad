"""request-conformance's probes and judge, pure, on hand-made evidence: what each probe asks
of a greedy reference, and each answer judged against it. The reference throughout is
``Hello world`` in four tokens ``Hel|lo| wor|ld`` (ids 11-14) ended by end-of-sequence (id
2): five tokens returned, the prompt 12 tokens. Every failing answer's finding names the
parameter and both values."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.request_conformance.evidence import Answer, ConformanceEvidence
from pytest_infercheck.checks.request_conformance.judge import judge
from pytest_infercheck.checks.request_conformance.present import describe
from pytest_infercheck.checks.request_conformance.probes import Reference, ask, stop_string
from pytest_infercheck.records import plain_data
from pytest_infercheck.report.views import item_detail
from pytest_infercheck.verdict.conduct import NotExercised, Unsupported
from tests.htmldom import parse

PIECES = ("Hel", "lo", " wor", "ld")
IDS = (11, 12, 13, 14)
EOS = 2
REF = Reference(PIECES, IDS, eos=True, max_tokens=16)
PROMPT_TOKENS = 12


def gen(
    text: str,
    ids: list[int] | None,
    finish: str,
    *,
    usage: tuple[int | None, int | None] = (None, None),
    tops: int | None = None,
    others: int = 0,
) -> Generation:
    """A generation; ``tops``: logprobs with that many top entries per token."""
    g = Generation(text, ids, finish)
    g.prompt_tokens, g.completion_tokens = usage
    if tops is not None and ids is not None:
        g.chosen_logprobs = [-0.1] * len(ids)
        g.top_logprobs = [{1000 + j: -0.1 - j for j in range(tops)} for _ in ids]
    g.others = tuple(Generation(text, ids, finish) for _ in range(others))
    return g


def evidence(probe: str, *answers: Generation, ref: Reference = REF, k: int = 3) -> Any:
    item = ConformanceEvidence("p1", probe, "m@llama", reference=ref, eos_id=EOS)
    item.prompt_tokens = PROMPT_TOKENS
    item.asked = ask(probe, ref, k)
    modes = ("non-streamed", "streamed")
    item.answers = [Answer(modes[i], g) for i, g in enumerate(answers)]
    return item


def findings(item: ConformanceEvidence) -> list[str]:
    judged = judge(ItemPlan("p1", "probe", "p1", param=item.probe), item, None)
    assert [v.text for v in judged.violations] == judged.record.findings
    return judged.record.findings


# -- the probes' requests -------------------------------------------------------------------
def test_each_stop_string_is_taken_where_it_first_occurs_at_its_token() -> None:
    assert stop_string("stop-token", REF) == "lo"
    assert stop_string("stop-tokens", REF) == "lo wor"
    assert stop_string("stop-spanning", REF) == "ll"  # 'Hel' ends inside, 'lo' starts
    # 'a' first occurs inside 'xa', not where its own token starts: the next candidate
    odd = Reference(("xa", "a"), (5, 6), eos=False, max_tokens=2)
    assert stop_string("stop-token", odd) == "xa"
    assert ask("stop-included", REF, 3).params == {"stop": ["lo"], "include_stop": True}


def test_a_stop_spanning_a_boundary_needs_a_token_of_two_characters() -> None:
    digits = Reference(("4", "6"), (40, 60), eos=True, max_tokens=8)
    assert stop_string("stop-tokens", digits) == "46"
    asked = ask("stop-spanning", digits, 3)
    assert asked.unbuildable is not None
    assert "no token of two characters or more" in asked.unbuildable


def test_the_counted_probes_are_built_from_the_tokens_returned() -> None:
    assert ask("max-tokens", REF, 3).params == {"max_tokens": 2}
    assert ask("min-tokens", REF, 3).params == {"min_tokens": 7, "max_tokens": 9}
    assert ask("ignore-eos", REF, 3).params == {"ignore_eos": True, "max_tokens": 8}
    chars = dataclasses.replace(REF, pieces=tuple("Hello world"), boundaries="characters")
    for probe in ("max-tokens", "min-tokens", "ignore-eos"):
        why = ask(probe, chars, 3).unbuildable
        assert why is not None and "cannot be counted" in why, probe
    cut = dataclasses.replace(REF, eos=False)
    why = ask("min-tokens", cut, 3).unbuildable
    assert why is not None and "does not end on end-of-sequence within 16" in why


# -- stop -----------------------------------------------------------------------------------
def test_a_stop_string_honoured_streamed_and_not_conforms() -> None:
    assert (
        findings(evidence("stop-spanning", gen("He", [11], "stop"), gen("He", None, "stop"))) == []
    )
    assert findings(evidence("stop-tokens", gen("Hel", [11], "stop"))) == []


def test_a_dropped_stop_string_fails_naming_it() -> None:
    item = evidence("stop-spanning", gen("He", [11], "stop"), gen("Hello world", None, "stop"))
    assert findings(item) == [
        "stop 'll' (streamed): text 'Hello world' != 'He' (generation went on past the stop string)"
    ]


def test_a_returned_stop_string_and_a_wrong_finish_reason_fail() -> None:
    item = evidence("stop-token", gen("Hello", [11, 12], "length"))
    assert findings(item) == [
        "stop 'lo' (non-streamed): text 'Hello' != 'Hel' (the stop string returned)",
        "stop 'lo' (non-streamed): finish_reason 'length' != 'stop'",
    ]


def test_include_stop_keeps_the_stop_string() -> None:
    assert findings(evidence("stop-included", gen("Hello", [11, 12], "stop"))) == []
    item = evidence("stop-included", gen("Hel", [11], "stop"))
    assert findings(item) == [
        "include_stop 'lo' (non-streamed): text 'Hel' != 'Hello' (the stop string left out)"
    ]


# -- max_tokens, ignore_eos, min_tokens -----------------------------------------------------
def test_max_tokens_is_exact_with_finish_reason_length() -> None:
    assert findings(evidence("max-tokens", gen("Hello", [11, 12], "length"))) == []
    dropped = gen("Hello world", [11, 12, 13, 14, EOS], "stop")
    assert findings(evidence("max-tokens", dropped)) == [
        "max_tokens 2 (non-streamed): 5 tokens returned != 2",
        "max_tokens 2 (non-streamed): ids [11, 12, 13, 14, 2] != the greedy output's first 2 "
        "[11, 12]",
        "max_tokens 2 (non-streamed): finish_reason 'stop' != 'length'",
    ]
    # text only (no ids): the text of the greedy output's first two tokens
    assert findings(evidence("max-tokens", gen("Hello wor", None, "length"))) == [
        "max_tokens 2 (non-streamed): text 'Hello wor' != the greedy output's first 2 tokens "
        "'Hello'"
    ]


def test_ignore_eos_runs_to_max_tokens() -> None:
    ran = gen("Hello world!!!", [11, 12, 13, 14, EOS, 7, 7, 7], "length")
    assert findings(evidence("ignore-eos", ran)) == []
    stopped = gen("Hello world", [11, 12, 13, 14, EOS], "stop")
    assert findings(evidence("ignore-eos", stopped)) == [
        "ignore_eos (non-streamed): 5 tokens returned != max_tokens 8",
        "ignore_eos (non-streamed): finish_reason 'stop' != 'length' (max_tokens 8)",
    ]


def test_min_tokens_holds_end_of_sequence_back() -> None:
    held = gen("Hello world!!!", [11, 12, 13, 14, 7, 7, 7, EOS], "stop")
    assert findings(evidence("min-tokens", held)) == []
    early = gen("Hello world", [11, 12, 13, 14, EOS], "stop")
    assert findings(evidence("min-tokens", early)) == [
        "min_tokens 7 (non-streamed): 5 tokens returned < 7",
        "min_tokens 7 (non-streamed): end-of-sequence (2) at token 4 < 7",
    ]
    assert findings(evidence("min-tokens", gen("Hello world!!", None, "stop"))) == [
        "min_tokens 7 (non-streamed): the tokens returned cannot be counted (neither ids nor "
        "logprobs returned)"
    ]


# -- usage ----------------------------------------------------------------------------------
FULL = [11, 12, 13, 14, EOS]


def test_usage_counts_the_prompt_and_the_tokens_returned() -> None:
    right = gen("Hello world", FULL, "stop", usage=(12, 5))
    assert findings(evidence("usage", right, right)) == []
    wrong = gen("Hello world", FULL, "stop", usage=(11, 6))
    assert findings(evidence("usage", right, wrong)) == [
        "usage.completion_tokens 6 != 5 tokens returned (streamed)",
        "usage.prompt_tokens 11 != 12 tokens sent (streamed)",
    ]


def test_usage_that_cannot_be_checked_fails_saying_why() -> None:
    item = evidence("usage", gen("Hello world", None, "stop", usage=(12, 5)))
    item.prompt_tokens, item.prompt_note = None, "prompt token count unknown: no /tokenize"
    assert findings(item) == [
        "usage.completion_tokens 5 (non-streamed): the tokens returned cannot be counted "
        "(neither ids nor logprobs returned)",
        "usage.prompt_tokens 12 (non-streamed): prompt token count unknown: no /tokenize",
    ]
    assert findings(evidence("usage", gen("Hello world", FULL, "stop"))) == [
        "usage (non-streamed): the answer reports no usage"
    ]
    # a stream is asked for its usage (stream_options.include_usage): judged alike
    quiet = evidence(
        "usage", gen("Hello world", FULL, "stop", usage=(12, 5)), gen("Hello world", FULL, "stop")
    )
    assert findings(quiet) == [
        "usage (streamed): the answer reports no usage (stream_options.include_usage asked)"
    ]


# -- logprobs, n ----------------------------------------------------------------------------
def test_the_number_of_top_logprobs_is_the_number_asked() -> None:
    assert findings(evidence("logprobs", gen("Hello world", FULL, "stop", tops=3))) == []
    assert findings(evidence("logprobs", gen("Hello world", FULL, "stop", tops=2))) == [
        "logprobs 3 (non-streamed): 2 top logprobs at token 0 != 3 asked (5 of 5 tokens)"
    ]
    assert findings(evidence("logprobs", gen("Hello world", FULL, "stop"))) == [
        "logprobs 3 (non-streamed): no logprobs returned"
    ]


def test_n_choices_under_sampling() -> None:
    asked = ask("n", REF, 3).params
    assert asked == {"n": 2, "temperature": 1.0, "seed": 0}
    assert findings(evidence("n", gen("a", [5], "stop", others=1))) == []
    assert findings(evidence("n", gen("a", [5], "stop"), gen("a", [5], "stop", others=1))) == [
        "n 2 (non-streamed): 1 choices != 2 asked"
    ]


# -- not sent, unbuildable ------------------------------------------------------------------
def test_a_probe_that_cannot_be_built_fails_and_one_not_sent_says_why() -> None:
    digits = Reference(("4", "6"), (40, 60), eos=True, max_tokens=8)
    item = evidence("stop-spanning", ref=digits)
    (finding,) = findings(item)
    assert finding.startswith("probe stop-spanning: the greedy output '46' (2 tokens")
    unsent = ConformanceEvidence("p1", "n", "m@llama")
    unsent.conduct.unsupported.append(
        Unsupported("param:n", "probe n", probed=True, evidence="a request with n: HTTP 400")
    )
    judged = judge(ItemPlan("p1", "probe", "p1", param="n"), unsent, None)
    assert judged.violations == []
    assert judged.record.not_sent == "unsupported: a request with n: HTTP 400"
    skipped = ConformanceEvidence("p1", "min-tokens", "m@llama")
    skipped.conduct.not_exercised.append(NotExercised("probe min-tokens", "not taken", True))
    record = judge(ItemPlan("p1", "probe", "p1", param="min-tokens"), skipped, None).record
    assert record.not_sent == "not exercised: not taken"


@pytest.mark.parametrize("probe", ["stop-token", "max-tokens", "logprobs", "ignore-eos"])
def test_every_answer_is_judged_streamed_as_well(probe: str) -> None:
    """A faithful non-streamed answer does not cover a faulty streamed one."""
    good = {
        "stop-token": gen("Hel", [11], "stop"),
        "max-tokens": gen("Hello", [11, 12], "length"),
        "logprobs": gen("Hello world", FULL, "stop", tops=3),
        "ignore-eos": gen("Hello world!!!", [11, 12, 13, 14, EOS, 7, 7, 7], "length"),
    }[probe]
    bad = gen("Hello world", FULL, "stop")
    found = findings(evidence(probe, good, bad))
    assert found and all("(streamed)" in f for f in found), found


def test_a_non_finite_logprob_fails_in_any_answer_or_the_reference() -> None:
    bad = gen("Hello", [11, 12], "length", tops=3)
    assert bad.chosen_logprobs is not None and bad.top_logprobs is not None
    bad.chosen_logprobs[1] = float("nan")
    item = evidence("max-tokens", gen("Hello", [11, 12], "length", tops=3), bad)
    assert findings(item) == ["non-finite logprob in the streamed answer: nan at token 1"]
    item = evidence("max-tokens", gen("Hello", [11, 12], "length"))
    item.generation = gen("Hello world", FULL, "stop", tops=3)
    assert item.generation.top_logprobs is not None
    item.generation.top_logprobs[2][1000] = float("inf")
    assert findings(item) == ["non-finite top logprob in the greedy reference: inf at token 2"]
    item.generation.top_logprobs[2][1000] = -float("inf")  # a token the engine ruled out
    assert findings(item) == []


def test_a_token_without_an_entry_is_no_value_but_the_logprobs_probe_counts_it() -> None:
    """llama-server leaves out the entries of a stop string's tokens (the backend puts NaN
    and no top logprobs there): not a non-finite value; the logprobs probe counts it."""
    cut = gen("Hel", [11, 12], "stop", tops=3)
    assert cut.chosen_logprobs is not None and cut.top_logprobs is not None
    cut.chosen_logprobs[1], cut.top_logprobs[1] = float("nan"), {}
    assert findings(evidence("stop-token", cut)) == []
    answer = gen("Hello world", FULL, "stop", tops=3)
    assert answer.chosen_logprobs is not None and answer.top_logprobs is not None
    answer.chosen_logprobs[4], answer.top_logprobs[4] = float("nan"), {}
    assert findings(evidence("logprobs", answer)) == [
        "logprobs 3 (non-streamed): 0 top logprobs at token 4 != 3 asked (1 of 5 tokens)"
    ]


def test_a_greedy_answer_must_repeat_the_greedy_output() -> None:
    """Every probe is greedy: an empty, cut or changed answer fails even where the count the
    probe reads is right."""
    empty = gen("", [], "stop", tops=3)
    assert findings(evidence("logprobs", empty)) == [
        "logprobs 3 (non-streamed): ids [] != the greedy output's [11, 12, 13, 14, 2]"
    ]
    cut = gen("Hello wor", [11, 12, 13], "length", usage=(12, 3))
    right = gen("Hello world", FULL, "stop", usage=(12, 5))
    assert findings(evidence("usage", right, cut)) == [
        "usage (streamed): ids [11, 12, 13] != the greedy output's [11, 12, 13, 14, 2]"
    ]
    other = gen("Hello word!!!", [11, 12, 13, 15, 7, 7, 7, 7], "length")
    assert findings(evidence("ignore-eos", other)) == [
        "ignore_eos (non-streamed): ids [11, 12, 13, 15] != the greedy output's [11, 12, 13, 14]"
    ]
    texts = gen("Hello world", None, "length", usage=(12, 5))
    texts.chosen_logprobs = [-0.1] * 5
    assert findings(evidence("usage", texts)) == [
        "usage (non-streamed): finish_reason 'length' != the greedy output's 'stop'"
    ]


def test_the_item_view_and_text_show_the_request_the_answers_and_the_findings() -> None:
    item = evidence("max-tokens", gen("Hello world", FULL, "stop", usage=(12, 5)))
    record = judge(ItemPlan("p1", "probe", "p1", param="max-tokens"), item, None).record
    text = describe(record)
    assert "probe max-tokens: asked {'max_tokens': 2}" in text
    assert "non-streamed: 'Hello world', finish_reason stop, 5 tokens, usage 12/5" in text
    page = parse(
        item_detail(
            {"kind": "request-conformance", "role": "probe", "data": plain_data(record)},
            "failed",
        )
    ).text()
    assert "max_tokens 2 (non-streamed): 5 tokens returned != 2" in page
    assert "'Hello world'" in page
