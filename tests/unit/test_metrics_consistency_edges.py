"""Edges of the fault checks that the mutation run (mutmut) found unguarded: where a loop
must go on past a skipped position, the ends of the shown lists, the tolerance passed down,
and the unit of an empty generation. Every expected value is worked by hand."""

from __future__ import annotations

import math

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.metrics.consistency import (
    empty_fault,
    generation_faults,
    logprob_faults,
    mismatched_positions,
    similarity_fault,
)
from pytest_infercheck.metrics.faults import aggregate_faults

NAN, INF = math.nan, math.inf


def test_ten_positions_are_all_shown_eleven_are_cut() -> None:
    (ten,) = logprob_faults("run 0", [NAN] * 10)
    assert ten.text == "non-finite logprob in run 0 at positions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 " + (
        "(NaN)"
    )
    assert ten.detail() == "run 0 at positions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9"
    (eleven,) = logprob_faults("run 0", [NAN] * 11)
    assert eleven.detail() == "run 0 at positions 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, ... (11 in all)"


def test_three_mismatches_are_all_quoted_four_are_counted() -> None:
    top = [{5: -0.5}] * 4
    (three,) = logprob_faults("r", [-0.1] * 3, top[:3], [5] * 3)
    assert three.text.endswith("position 2: chosen -0.1 above the top-1 -0.5)")
    (four,) = logprob_faults("r", [-0.1] * 4, top, [5] * 4)
    assert four.text.endswith("position 2: chosen -0.1 above the top-1 -0.5; ... (4 in all))")
    assert four.positions == (0, 1, 2, 3)


def test_positions_after_a_skipped_one_are_still_judged() -> None:
    # position 0 is skipped (empty map / NaN or +inf in its map / unusable text key / no key);
    # position 1 is above its top-1 (-0.1 > -0.5 + 1e-4) or off its entry and must be found.
    assert mismatched_positions([-0.1, -0.1], [{}, {5: -0.5}], [5, 5]) == [(1, -0.1, -0.5, "top-1")]
    assert mismatched_positions([-0.1, -0.1], [{5: NAN}, {5: -0.5}], [5, 5]) == [
        (1, -0.1, -0.5, "top-1")
    ]
    rows = [{"\ufffd": -0.2}, {"a": -0.2}]
    assert mismatched_positions([-0.9, -0.9], rows, ["\ufffd", "a"], keyed_by="text") == [
        (1, -0.9, -0.2, "its top-k entry")
    ]


def test_a_map_holding_plus_inf_is_not_judged_here() -> None:
    # +inf in the map is a non-finite fault of its own; the entry of token 6 is not compared.
    assert mismatched_positions([-0.5], [{5: INF, 6: -0.1}], [6]) == []


def test_fewer_keys_than_positions_judge_only_the_top_1() -> None:
    # position 1 has no key: chosen -0.9 is below the top-1 -0.2, nothing else to hold it to.
    assert mismatched_positions([-0.2, -0.9], [{5: -0.2}, {5: -0.2}], [5]) == []


def test_an_entry_exactly_tol_away_agrees() -> None:
    # |-1.0 - -1.5| = 0.5 <= tol = 0.5 (exact in binary floats)
    assert mismatched_positions([-1.5], [{5: -1.0}], [5], tol=0.5) == []
    assert mismatched_positions([-1.5], [{5: -1.0}], [5], tol=0.25) == [
        (0, -1.5, -1.0, "its top-k entry")
    ]


def test_logprob_and_generation_faults_pass_tol_and_key_kind_down() -> None:
    top = [{5: -1.0}]
    assert logprob_faults("r", [-1.5], top, [5], tol=0.5) == []
    assert len(logprob_faults("r", [-1.5], top, [5])) == 1
    # a text key several tokens share is not looked up (keyed_by must reach the matcher)
    assert logprob_faults("r", [-0.9], [{"\ufffd": -0.2}], ["\ufffd"], keyed_by="text") == []
    gen = Generation("x", None, "stop", [-0.9], [{"\ufffd": -0.2}], top_keys="text")
    gen.token_texts = ["\ufffd"]
    assert generation_faults("run 0", gen) == []
    by_id = Generation("x", [5], "stop", [-1.5], [{5: -1.0}])
    assert generation_faults("run 0", by_id, tol=0.5) == []
    assert len(generation_faults("run 0", by_id)) == 1


def test_a_top_k_problem_names_its_output() -> None:
    (fault,) = logprob_faults("run 3", None, [{5: NAN}])
    assert fault.where == "run 3"
    sim = similarity_fault("chat vs completions", INF)
    assert sim is not None and sim.where == "chat vs completions"


def test_empty_generation_units_and_counts() -> None:
    # one side without token ids: characters, whatever the finish reasons say
    chars = empty_fault(("", None, "stop"), ("ab", [1, 2, 3], "length"), a_name="a", b_name="b")
    assert chars is not None
    assert chars.text == "empty generation: a generated no characters while b generated 2"
    chars = empty_fault(("", [2], "stop"), ("abc", None, "stop"), a_name="a", b_name="b")
    assert chars is not None
    assert chars.text == "empty generation: a generated no characters while b generated 3"
    # both with ids: tokens (3 of them, not the 2 characters), one token before the EOS is 1
    toks = empty_fault(("", [2], "stop"), ("ab", [1, 2, 3], "length"), a_name="a", b_name="b")
    assert toks is not None
    assert toks.text == "empty generation: a generated no tokens while b generated 3"
    one = empty_fault(("", [2], "stop"), ("x", [7, 2], "stop"), a_name="a", b_name="b")
    assert one is not None
    assert one.text == "empty generation: a generated no tokens while b generated 1"
    assert (one.where, one.positions, one.unit) == ("a", (), "position")


def test_the_aggregate_shows_five_items_by_default() -> None:
    nan0 = logprob_faults("run 0", [INF])
    five = aggregate_faults([(f"p{i}", nan0) for i in range(5)])
    assert not five[0].endswith("...")
    six = aggregate_faults([(f"p{i}", nan0) for i in range(6)])
    assert six[0].endswith("p4 (run 0 at position 0), ...")
