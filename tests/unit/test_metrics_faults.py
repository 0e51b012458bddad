"""The one fault type (:mod:`pytest_infercheck.metrics.faults`): its text, its detail and
its group in an aggregate (worked by hand), its round trip through JSON (alone and in the
records of an engine kind and of a comparison), and the forms earlier versions wrote read
back: a comparison's ``problems`` objects with a ``type``, a comparison's bare-text
``faults``."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from pytest_infercheck.checks.determinism.records import DeterminismPrompt
from pytest_infercheck.checks.stress.records import StressLevel
from pytest_infercheck.metrics.consistency import empty_fault, logprob_faults
from pytest_infercheck.metrics.faults import (
    EMPTY_GENERATION,
    NON_FINITE_LOGPROB,
    TOPK_NOT_NORMALISED,
    Fault,
    aggregate_faults,
    empty_generation_fault,
    fault_from_plain,
    faults_from_plain,
    non_finite,
    not_normalised,
)
from pytest_infercheck.metrics.finite import check_logprob_rows, check_topk_rows, check_values
from pytest_infercheck.records import load_record, plain_data

NAN, INF = math.nan, math.inf


# -- saying it -------------------------------------------------------------------------------
def test_the_constructors_say_it_by_hand() -> None:
    kl = non_finite("KL", [5, 2][::-1], ["+inf", "nan"])
    assert kl == Fault("non-finite KL", "", "non-finite KL at positions 2, 5 (NaN, +inf)", (2, 5))
    run = non_finite("logprob", (1,), ("nan",), where="run 3")
    assert run.text == "non-finite logprob in run 3 at position 1 (NaN)"
    assert (run.fault, run.where) == ("non-finite logprob", "run 3")
    scalar = non_finite("similarity", (), ("nan",))
    assert scalar.text == "non-finite similarity (NaN)" and scalar.positions == ()
    off = not_normalised("test logprobs", (0, 3), (0.5, -INF), 1e-4)
    assert off.fault == "test logprobs not normalised"
    assert off.text == (
        "test logprobs do not normalise at positions 0, 3 (logsumexp +0.5, -inf; tolerance 0.0001)"
    )
    empty = empty_generation_fault("the test", "the baseline", 12)
    assert empty == Fault(
        EMPTY_GENERATION,
        "the test",
        "empty generation: the test generated no tokens while the baseline generated 12",
    )
    assert empty.describe() == empty.text


def test_positions_are_a_tuple_whatever_they_are_given_as() -> None:
    fault = Fault("f", "w", "t", [3, 4], "request")  # type: ignore[arg-type]
    assert fault.positions == (3, 4)
    assert hash(fault) == hash(Fault("f", "w", "t", (3, 4), "request"))


def test_the_detail_is_where_and_at_which_positions() -> None:
    assert Fault("f", "run 3", "t", (2, 5)).detail() == "run 3 at positions 2, 5"
    assert Fault("f", "", "t", (2,)).detail() == "position 2"
    assert Fault("f", "c8", "t", (1,), "request").detail() == "c8 at request 1"
    assert Fault("f", "run 0", "t").detail() == "run 0"
    assert Fault("f", "", "t").detail() == ""


def test_every_detector_returns_the_one_type() -> None:
    found = [
        check_values("KL", [0.0, NAN]),
        *check_logprob_rows("test logprobs", [[0.0, 0.0]]),  # mass 2: logsumexp log 2
        *check_topk_rows("top-k", [{1: INF}]),
        empty_fault(("", [], None), ("a", [1], None), a_name="a", b_name="b"),
        *logprob_faults("run 0", [NAN]),
    ]
    assert all(isinstance(f, Fault) for f in found)
    assert [f.fault for f in found if f is not None] == [
        "non-finite KL",
        "test logprobs not normalised",
        "non-finite top-k",
        "empty generation",
        "non-finite logprob",
    ]


# -- grouping it -----------------------------------------------------------------------------
def test_the_aggregate_groups_by_what_naming_items_and_where() -> None:
    """Two kinds' faults in one aggregate: grouped by :attr:`Fault.fault`, first-seen order,
    items counted once each, the detail after each item (none for a fault without where
    or positions)."""
    per_item = [
        ("r001", []),
        ("r003", [non_finite("KL", (2, 5), ("nan",)), non_finite("KL", (7,), ("nan",))]),
        ("r007", [non_finite("logprob", (0,), ("+inf",), where="run 0")]),
        ("r009", [non_finite("KL", (0,), ("+inf",)), non_finite("similarity", (), ("nan",))]),
    ]
    assert aggregate_faults(per_item, n_items=60) == [
        # r003 twice (two faults) but counted once: 2 prompts
        "non-finite KL in 2 of 60 prompts: r003 (positions 2, 5), r003 (position 7), "
        "r009 (position 0)",
        "non-finite logprob in 1 of 60 prompts: r007 (run 0 at position 0)",
        "non-finite similarity in 1 of 60 prompts: r009",
    ]
    many = [(f"h{i}", [empty_generation_fault(f"run {i}", "run 0", 1)]) for i in range(3)]
    assert aggregate_faults(many, item_unit="hostile requests", shown=2) == [
        "empty generation in 3 of 3 hostile requests: h0 (run 0), h1 (run 1), ..."
    ]
    assert aggregate_faults([("r001", [])]) == []


# -- reading it back -------------------------------------------------------------------------
def test_round_trip_through_json() -> None:
    faults = [
        non_finite("KL", (2, 5), ("nan",)),
        not_normalised("test logprobs", (0,), (-INF,), 1e-4, unit="row"),
        empty_generation_fault("run 1", "run 0", 3, "characters"),
        *logprob_faults("run 3", [-0.5, NAN], [{5: -0.5}, {5: NAN}], [5, 5]),
    ]
    docs = json.loads(json.dumps([f.to_dict() for f in faults]))
    assert docs[0] == {
        "fault": "non-finite KL",
        "where": "",
        "text": "non-finite KL at positions 2, 5 (NaN)",
        "positions": [2, 5],
        "unit": "position",
    }
    assert [fault_from_plain(d) for d in docs] == faults
    assert faults_from_plain(docs) == faults
    assert fault_from_plain(faults[0]) is faults[0]


def test_the_old_comparison_problem_shapes_read_back_as_that_version_said_them() -> None:
    """As the previous version wrote ``problems`` (``Problem.to_dict()``, then JSON; an all
    -inf row's logsumexp as null): each reads back to the fault the detectors make now."""
    old = [
        {"type": "non-finite", "what": "KL", "positions": [2, 5], "kinds": ["nan", "+inf"]},
        {
            "type": "non-finite",
            "what": "latency",
            "positions": [1],
            "kinds": ["nan"],
            "unit": "run",
        },
        {"type": "non-finite", "what": "similarity", "positions": [], "kinds": ["nan"]},
        {
            "type": "not-normalised",
            "what": "test logprobs",
            "positions": [0, 3],
            "logsumexp": [0.5, None],
            "tol": 0.0001,
            "unit": "position",
        },
        {
            "type": "empty-generation",
            "empty": "the test",
            "other": "the baseline",
            "other_count": 4,
        },
    ]
    back = faults_from_plain(old)
    assert [f.text for f in back] == [
        "non-finite KL at positions 2, 5 (NaN, +inf)",
        "non-finite latency at run 1 (NaN)",
        "non-finite similarity (NaN)",
        "test logprobs do not normalise at positions 0, 3 (logsumexp +0.5, -inf; tolerance 0.0001)",
        "empty generation: the test generated no tokens while the baseline generated 4",
    ]
    assert back[0] == check_values("KL", [0.0, 0.0, NAN, 0.0, 0.0, INF])
    assert back[1].unit == "run" and back[1].positions == (1,)
    assert back[3].fault == "test logprobs not normalised"
    assert (back[4].fault, back[4].where) == (EMPTY_GENERATION, "the test")
    with pytest.raises(ValueError, match="unknown problem type 'other'"):
        fault_from_plain({"type": "other"})
    with pytest.raises(ValueError, match="not a fault"):
        fault_from_plain({"type": "non-finite", "what": "KL"})
    with pytest.raises(ValueError, match="not a fault"):
        fault_from_plain(3)


def test_old_bare_texts_read_back_under_the_engine_kinds_names() -> None:
    """A comparison's ``faults`` were texts: each is named as the engine kinds name it."""
    texts = {
        "non-finite logprob in the test output at position 0 (NaN)": NON_FINITE_LOGPROB,
        "non-finite top-k logprobs in the test output at position 1 (NaN)": NON_FINITE_LOGPROB,
        "top-k logprobs in the baseline output do not normalise at position 0 "
        "(logsumexp +0.654; tolerance 0.5)": TOPK_NOT_NORMALISED,
        "logprob does not match its token in the test output at position 2 (...)": (
            "logprob does not match its token"
        ),
        "empty generation: the test output of turn 1 generated no tokens while ...": (
            EMPTY_GENERATION
        ),
        "something new: said otherwise": "something new",
    }
    for text, name in texts.items():
        assert fault_from_plain(text) == Fault(name, "", text)


def test_records_of_an_engine_kind_and_of_the_previous_version_load() -> None:
    """An engine kind's record carries the one type; its JSON reads back equal, and a
    record whose faults are in an old form loads too."""
    fault = non_finite("logprob", (2,), ("nan",), where="run 1")
    prompt = DeterminismPrompt(
        prompt_id="r1",
        target="t",
        runs=2,
        modal_share=1.0,
        distinct=1,
        errors=0,
        error_messages=[],
        first_divergences=[None, None],
        max_logprob_drift=0.0,
        outputs=[],
        faults=[fault],
    )
    plain = json.loads(json.dumps(plain_data(prompt)))
    assert plain["faults"] == [fault.to_dict()]
    assert load_record(DeterminismPrompt, plain) == prompt
    texts = {**plain, "faults": [fault.text]}
    assert load_record(DeterminismPrompt, texts).faults == [
        dataclasses.replace(fault, where="", positions=())
    ]
    level = StressLevel(
        target="t",
        level=2,
        requests=4,
        errors={},
        error_rate=0.0,
        consistent=4,
        consistency=1.0,
        flips=0,
        flip_rate=0.0,
        latency_p50_s=None,
        latency_p95_s=None,
        tokens_per_s=None,
        achieved_concurrency=None,
        max_in_flight=2,
        mismatches=[],
        faults=[fault],
    )
    assert load_record(StressLevel, json.loads(json.dumps(plain_data(level)))).faults == [fault]
