"""The faults of one output, computed by hand: non-finite logprobs (``-inf`` is fine, an
unreported position is not a value), top-k maps that are not finite or hold more than all
the mass, chosen logprobs that do not match their token, empty generations, non-finite
latencies and similarities, and the aggregate's lines."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.metrics.consistency import (
    content_size,
    empty_fault,
    generation_faults,
    is_empty,
    latency_fault,
    logprob_faults,
    mismatched_positions,
    reported_logprobs,
    similarity_fault,
)
from pytest_infercheck.metrics.faults import Fault, aggregate_faults

NAN, INF = math.nan, math.inf


def texts(faults: list[Fault]) -> list[str]:
    return [f.text for f in faults]


# -- reported positions --------------------------------------------------------------------------
def test_a_nan_with_an_empty_map_is_unreported_any_other_nan_is_a_value() -> None:
    # llama-server's adapter marks a position it got no entry for as NaN with an empty map.
    got = reported_logprobs([-0.5, NAN, NAN, -INF], [{1: -0.5}, {}, {3: -0.1}, {4: -0.01}])
    assert got is not None and got[0] == -0.5 and got[1] is None
    assert math.isnan(got[2]) and got[3] == -INF  # type: ignore[arg-type]
    no_top = reported_logprobs([NAN], None)
    assert no_top is not None and math.isnan(no_top[0])  # type: ignore[arg-type]
    assert reported_logprobs(None, None) is None


# -- non-finite ----------------------------------------------------------------------------------
def test_non_finite_chosen_logprobs_are_named_with_their_positions() -> None:
    faults = logprob_faults("run 3", [-0.5, NAN, -INF, INF, -1.0, NAN])
    assert texts(faults) == ["non-finite logprob in run 3 at positions 1, 3, 5 (NaN, +inf)"]
    (fault,) = faults
    assert (fault.fault, fault.where, fault.positions) == ("non-finite logprob", "run 3", (1, 3, 5))
    assert fault.detail() == "run 3 at positions 1, 3, 5"
    # -inf alone (probability 0) is legitimate; no logprobs: nothing to check
    assert logprob_faults("run 0", [-INF, -0.25]) == []
    assert logprob_faults("run 0", None) == []


def test_an_unreported_position_is_no_fault_and_a_nan_beside_a_map_is() -> None:
    assert logprob_faults("x", [-0.5, NAN], [{7: -0.5}, {}], [7, 8]) == []
    assert texts(logprob_faults("x", [-0.5, NAN], [{7: -0.5}, {8: -0.1}], [7, 8])) == [
        "non-finite logprob in x at position 1 (NaN)"
    ]


def test_non_finite_top_k_values_are_non_finite_logprobs() -> None:
    faults = logprob_faults("the streamed output", [-0.5, -0.25], [{1: -0.5}, {2: NAN, 3: -2.0}])
    assert texts(faults) == ["non-finite top-k logprobs in the streamed output at position 1 (NaN)"]
    assert faults[0].fault == "non-finite logprob"


def test_a_top_k_map_holding_more_than_all_the_mass_is_not_normalised() -> None:
    # log(e^0.1 + e^-0.2) = log(1.105171 + 0.818731) = log(1.923902) = 0.654356 > 0.5
    faults = logprob_faults("run 0", [0.1], [{1: 0.1, 2: -0.2}], [1])
    assert texts(faults) == [
        "logprob above 0 in run 0 at position 0 (position 0: 0.1)",
        "top-k logprobs in run 0 do not normalise at position 0 (logsumexp +0.654; tolerance 0.5)",
    ]
    assert [f.fault for f in faults] == ["logprob above 0", "top-k logprobs not normalised"]
    # bf16 rounding, as mlx_lm.server sends it for the tiny adder in bf16 ("99+9=", top-5),
    # sorted: log(e^-0.5625 + e^-0.8125 + e^-4.375 + e^-7.1875 + e^-9.1875) = +0.0266: not a
    # fault (mlx_lm.server itself sends this list unsorted, "6" first: a fault of its own)
    bf16 = [{"5": -0.5625, "4": -0.8125, "6": -4.375, "3": -7.1875, "7": -9.1875}]
    assert logprob_faults("run 0", [-0.5625], bf16, ["5"], keyed_by="text") == []


# -- logprobs against their tokens ---------------------------------------------------------------
def test_a_chosen_logprob_above_the_top_1_or_off_its_entry_does_not_match() -> None:
    top = [{5: -0.5, 6: -1.0}] * 4
    # 0: -0.1 > -0.5 + 1e-4 (above the top-1); 1: token 6, -1.2 vs its entry -1.0 (0.2 off);
    # 2: token 6, -1.00005 vs -1.0 (5e-5 <= 1e-4: agrees); 3: token 9 not in the map and
    # below the top-1: nothing to hold it to.
    chosen = [-0.1, -1.2, -1.00005, -3.0]
    assert mismatched_positions(chosen, top, [5, 6, 6, 9]) == [
        (0, -0.1, -0.5, "top-1"),
        (1, -1.2, -1.0, "its top-k entry"),
    ]
    assert texts(logprob_faults("run 2", chosen, top, [5, 6, 6, 9])) == [
        "logprob does not match its token in run 2 at positions 0, 1 (position 0: chosen "
        "-0.1 above the top-1 -0.5; position 1: chosen -1.2, its top-k entry -1)"
    ]
    # the same logprobs at the tolerance's edge and -inf on both sides agree
    assert mismatched_positions([-0.4999, -INF], [{5: -0.5}, {5: -0.1, 6: -INF}], [5, 6]) == []


def test_text_keys_that_several_tokens_share_are_not_looked_up() -> None:
    top = [{"\ufffd": -0.2, "a": -0.3}, {"": -0.1, "b": -0.5}, {"bytes:\\xe4": -0.1}]
    # the chosen value is off the entry of its (shared) text, but within the top-1 bound
    chosen = [-0.9, -0.9, -0.9]
    keys = ["\ufffd", "", "bytes:\\xe4"]
    assert mismatched_positions(chosen, top, keys, keyed_by="text") == []
    assert mismatched_positions([-0.9], [{"a": -0.3}], ["a"], keyed_by="text") == [
        (0, -0.9, -0.3, "its top-k entry")
    ]


def test_generation_faults_read_ids_or_token_texts() -> None:
    by_id = Generation("46", [55, 57, 2], "stop", [-0.1, -0.2, -0.3], [{55: -0.1}, {58: -0.1}, {}])
    # position 1: token 57 is not in the map and -0.2 <= -0.1; position 2: chosen -0.3 with
    # an empty map: nothing to compare (not NaN, so not unreported either)
    assert generation_faults("run 0", by_id) == []
    swapped = Generation("46", [55, 57], "stop", [-0.1, -0.05], [{55: -0.1}, {57: -2.0}])
    assert texts(generation_faults("run 1", swapped)) == [
        "logprob does not match its token in run 1 at position 1 (position 1: chosen -0.05 "
        "above the top-1 -2)"
    ]
    by_text = Generation(
        "46", None, "stop", [-0.1, -0.7], [{"4": -0.1}, {"6": -0.2, "7": -2.0}], top_keys="text"
    )
    by_text.token_texts = ["4", "6"]  # e^-0.2 + e^-2 = 0.954 <= 1: a normalised map
    assert texts(generation_faults("the chat output", by_text)) == [
        "logprob does not match its token in the chat output at position 1 (position 1: "
        "chosen -0.7, its top-k entry -0.2)"
    ]


# -- empty generations ---------------------------------------------------------------------------
def test_empty_means_no_text_and_no_token_but_the_eos_it_stopped_on() -> None:
    assert content_size("46", [55, 57, 2], "stop") == 2
    assert content_size("46", [55, 57], "length") == 2
    assert content_size("46", None, "stop") == 2  # characters
    assert is_empty("", [2], "stop") and is_empty("", [], "length") and is_empty("", None, None)
    assert not is_empty("", [9], "length")  # a token that decodes to nothing is a token
    assert not is_empty("x", [], "stop")


def test_one_empty_side_is_a_named_fault_two_agree() -> None:
    full = ("46", [55, 57, 2], "stop")
    fault = empty_fault(("", [2], "stop"), full, a_name="run 1", b_name="run 0")
    assert fault is not None and fault.fault == "empty generation"
    assert fault.text == "empty generation: run 1 generated no tokens while run 0 generated 2"
    reverse = empty_fault(full, ("", [], "length"), a_name="the alone", b_name="the batched")
    assert reverse is not None and reverse.text == (
        "empty generation: the batched generated no tokens while the alone generated 2"
    )
    text_only = empty_fault(("", None, "stop"), ("46", None, "stop"), a_name="a", b_name="b")
    assert text_only is not None
    assert text_only.text == "empty generation: a generated no characters while b generated 2"
    assert empty_fault(("", [2], "stop"), ("", None, "stop"), a_name="a", b_name="b") is None
    assert empty_fault(full, ("4", [55, 2], "stop"), a_name="a", b_name="b") is None


# -- measurements --------------------------------------------------------------------------------
def test_non_finite_latency_and_similarity() -> None:
    fault = latency_fault("c8", [0.5, NAN, 0.25, INF, -INF])
    assert fault is not None and fault.fault == "non-finite latency"
    assert fault.text == "non-finite latency at requests 1, 3, 4 (NaN, +inf, -inf)"
    assert fault.detail() == "c8 at requests 1, 3, 4"
    assert latency_fault("c8", [0.5, 0.0]) is None
    sim = similarity_fault("chat vs completions", NAN)
    assert sim is not None and sim.fault == "non-finite similarity"
    assert sim.text == "non-finite similarity of chat vs completions (NaN)"
    assert similarity_fault("chat vs completions", 0.0) is None


def test_the_aggregate_names_each_kind_of_fault_and_its_items() -> None:
    nan3 = logprob_faults("run 3", [-0.5, -0.5, NAN, -0.5, -0.5, NAN])
    nan0 = logprob_faults("run 0", [INF])
    empty = empty_fault(("", [2], "stop"), ("4", [52, 2], "stop"), a_name="run 1", b_name="run 0")
    assert empty is not None
    lines = aggregate_faults([("r003", nan3), ("r005", []), ("r007", [*nan0, empty])], n_items=20)
    assert lines == [
        "non-finite logprob in 2 of 20 prompts: r003 (run 3 at positions 2, 5), "
        "r007 (run 0 at position 0)",
        "empty generation in 1 of 20 prompts: r007 (run 1)",
    ]
    assert aggregate_faults([("r005", [])]) == []
    many = [(f"p{i}", nan0) for i in range(7)]
    assert aggregate_faults(many, item_unit="items", shown=2) == [
        "non-finite logprob in 7 of 7 items: p0 (run 0 at position 0), "
        "p1 (run 0 at position 0), ..."
    ]


@pytest.mark.parametrize("value", [NAN, INF])
def test_each_non_finite_chosen_value_alone_is_a_fault(value: float) -> None:
    assert [f.positions for f in logprob_faults("r", [value])] == [(0,)]
