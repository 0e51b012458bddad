"""The degenerate-output rule (:mod:`pytest_infercheck.metrics.degenerate`) on hand-built
sequences: loops and stutters it must find, with their period, start and cover counted by
hand, and the near misses it must not flag."""

from __future__ import annotations

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.metrics.degenerate import (
    Degenerate,
    DegenerateScan,
    find_degenerate,
    generation_degenerate,
    stutter,
    tail_loop,
    total_degenerate,
)

PREFIX = [5, 6, 7, 8, 9, 10, 11, 12]  # eight distinct tokens before the pattern


def test_a_token_repeating_to_max_tokens_is_a_loop() -> None:
    ids = PREFIX + [42] * 20  # 28 tokens: the last 20 are one token
    found = find_degenerate(ids, "length", where="run 3", texts=[f"<{i}>" for i in ids])
    assert found == Degenerate(
        "loop",
        "run 3",
        1,
        8,
        20,
        28,
        "token",
        "<42>",
        "loop of period 1 ('<42>') in run 3: 20 of 28 tokens from token 8 to the end",
    )


def test_an_ngram_loop_reports_its_period_and_where_it_starts() -> None:
    ids = [1, 2, 3] + [7, 8, 9] * 6  # a 3-gram six times: 18 tokens from 3
    found = find_degenerate(ids, "length", where="the test output")
    assert found is not None
    assert (found.pattern, found.period, found.start, found.covered, found.total) == (
        "loop",
        3,
        3,
        18,
        21,
    )
    assert found.repeated == "7 8 9"  # no token texts: the ids
    # a partial last period still belongs to the loop: 7 8 9 x6 then 7 8 -> 20 tokens
    cut = find_degenerate([1, 2, 3] + [7, 8, 9] * 6 + [7, 8], "length", where="x")
    assert cut is not None and (cut.period, cut.start, cut.covered) == (3, 3, 20)


def test_the_longest_cover_wins_and_ties_take_the_shortest_period() -> None:
    assert tail_loop([4] * 10) == (1, 10)  # periods 2..5 also repeat, covering 10 too
    assert tail_loop([1, 2] * 8) == (2, 16)
    assert tail_loop([1, 2, 3]) is None


def test_near_misses_are_not_loops() -> None:
    # natural answers that repeat a little: short, or stopped by themselves
    assert find_degenerate([1, 1, 1], "length", where="x") is None  # "1 1 1"
    assert find_degenerate(list("100000"), "stop", where="x", unit="character") is None
    assert find_degenerate(PREFIX + [42] * 15, "length", where="x") is None  # 15 < 16
    assert find_degenerate(PREFIX + [42] * 16, "length", where="x") is not None  # the edge
    # a loop that stopped by itself is the model's choice
    assert find_degenerate(PREFIX + [42] * 40, "stop", where="x") is None
    # 16 tokens of an 8-gram are 2 periods, not 4; 32 are
    gram = list(range(100, 108))
    assert find_degenerate(PREFIX + gram * 2, "length", where="x") is None
    assert find_degenerate(PREFIX + gram * 4, "length", where="x") is not None
    # a 9-gram is longer than MAX_PERIOD
    assert find_degenerate(list(range(200, 209)) * 5, "length", where="x") is None
    # a loop in the middle that does not reach the end
    assert find_degenerate(PREFIX + [42] * 30 + [1, 2], "length", where="x") is None


def test_every_other_token_duplicated_is_a_stutter() -> None:
    ids = [1, 2, 3] + [t for t in range(10, 20) for _ in (0, 1)] + [4]  # 10 pairs from 3
    found = find_degenerate(ids, "stop", where="the batched output", texts=[f"t{i}" for i in ids])
    assert found is not None
    assert (found.pattern, found.period, found.start, found.covered, found.total) == (
        "stutter",
        2,
        3,
        20,
        24,
    )
    assert found.repeated == "t10t10t11t11"
    assert found.text == (
        "stutter (every other token duplicated: 't10t10t11t11'...) in the batched output: "
        "20 of 24 tokens from token 3"
    )
    assert stutter([9, 1, 1, 2, 2, 3, 3]) == (1, 3)  # an odd start


def test_near_misses_are_not_stutters() -> None:
    pairs = [t for t in range(10, 17) for _ in (0, 1)]  # 7 pairs: one short
    assert find_degenerate(pairs, "length", where="x") is None
    assert find_degenerate([*pairs, 17, 17], "length", where="x") is not None
    # one broken pair splits the run into 4 + 4
    broken = (
        [t for t in range(10, 14) for _ in (0, 1)]
        + [99]
        + [t for t in range(14, 18) for _ in (0, 1)]
    )
    assert stutter(broken) == (0, 4)  # the first of two runs of 4
    assert find_degenerate(broken, "length", where="x") is None
    # the same pair again is a loop of period 1, not a stutter (and stopped: no loop either)
    assert find_degenerate([5] * 40, "stop", where="x") is None
    assert stutter([5] * 40) == (0, 0)
    # two units alternating in pairs are a loop of period 4 (stopped: not flagged either)
    assert stutter([0, 0, 1, 1] * 8) == (0, 0)
    assert find_degenerate([0, 0, 1, 1] * 8, "stop", where="x") is None
    # a pair may repeat the previous pair's unit: 9 9 9 9 0 0 1 1 ... is a stutter of 9
    doubled = [u for u in [9, 9, 9, 0, 1, 1, 0, 9, 0] for _ in (0, 1)]
    assert stutter(doubled) == (0, 9)
    assert stutter([7, *doubled[:-1]]) == (1, 8)  # an odd start, the last pair cut
    # "the the" once in a sentence
    assert find_degenerate([1, 2, 2, 3, 4, 5, 6, 7, 8], "stop", where="x") is None


def test_empty_inputs_have_no_finding() -> None:
    assert find_degenerate([], "length", where="x") is None
    assert find_degenerate([], None, where="x", unit="character") is None
    assert generation_degenerate("x", Generation("", None, "length")) is None
    assert generation_degenerate("x", Generation("", [2], "stop")) is None
    assert stutter([]) == (0, 0) and tail_loop([]) is None


def test_a_generation_is_read_by_its_ids_without_its_eos() -> None:
    ids = PREFIX + [42] * 16
    # stopped: the EOS (2) is left out, and a stopped loop is no loop
    assert generation_degenerate("run 0", Generation("", [*ids, 2], "stop")) is None
    found = generation_degenerate(
        "run 0", Generation("", ids, "length", token_texts=["a"] * 8 + [" the"] * 16)
    )
    assert found is not None and (found.start, found.covered, found.repeated) == (8, 16, " the")
    # token texts that do not line up with the ids are not used
    odd = generation_degenerate("run 0", Generation("", ids, "length", token_texts=["a"]))
    assert odd is not None and odd.repeated == "42"


def test_text_only_generations_are_read_as_words_then_characters() -> None:
    words = generation_degenerate("x", Generation("Answer:" + " the" * 20, None, "length"))
    assert words is not None
    assert (words.unit, words.period, words.start, words.covered) == ("word", 1, 1, 20)
    chars = generation_degenerate("x", Generation("ok" + "ab" * 10, None, "length"))
    assert chars is not None and (chars.unit, chars.period, chars.start) == ("character", 2, 2)
    # stutter in characters: "hheelllloo" breaks at "ll ll" (same pair twice)
    stutter_text = "".join(c + c for c in "abcdefghij")
    found = generation_degenerate("x", Generation(stutter_text, None, "stop"))
    assert found is not None and (found.pattern, found.unit, found.covered) == (
        "stutter",
        "character",
        20,
    )
    assert generation_degenerate("x", Generation("The answer is 1 1 1.", None, "stop")) is None


def test_the_repeated_text_is_escaped_and_clipped_in_the_description() -> None:
    texts = ["a"] * 4 + ["\x1b[31m"] * 16
    found = find_degenerate(list(range(4)) + [9] * 16, "length", where="x", texts=texts)
    assert found is not None and found.repeated == "\x1b[31m"  # raw in the record
    assert "\x1b" not in found.text and "'\\x1b[31m'" in found.text
    long = ["y" * 50] * 16
    clipped = find_degenerate([3] * 16, "length", where="x", texts=long)
    assert clipped is not None and f"'{'y' * 40}...'" in clipped.text


def test_the_total_counts_generations_and_findings_by_pattern() -> None:
    loop = find_degenerate([42] * 16, "length", where="run 1")
    stut = find_degenerate([t for t in range(8) for _ in (0, 1)], "stop", where="run 2")
    assert loop is not None and stut is not None
    total = total_degenerate(
        [
            ("p1", DegenerateScan(10, [loop])),
            ("p2", DegenerateScan(10)),
            ("p3", DegenerateScan(20, [stut, loop])),
        ]
    )
    assert (total.generations, total.found, total.by_pattern) == (40, 3, {"loop": 2, "stutter": 1})
    assert total.text.startswith("degenerate: 3 of 40 generations (loop 2, stutter 1): p1: loop")
    assert total_degenerate([("p1", DegenerateScan(4))]).text == "degenerate: 0 of 4 generations"
    assert len(total_degenerate([("p", DegenerateScan(9, [loop] * 9))]).items) == 5
    assert DegenerateScan(1, [loop]).violations() == [f"degenerate output: {loop.text}"]
