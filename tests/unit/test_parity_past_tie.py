"""What follows a near-tie in stream/endpoint parity (:func:`~pytest_infercheck.checks.
parity.judge.past_the_tie`), called directly (found by the mutation run,
tests/unit/MUTATION.md): near-ties chained through continuations, a near-tie at the
reference's last token, a later divergence that is decisive (its own rule) or unlabelled,
at the evidence's tie_margin. Margins worked out by hand from the top-k below."""

from __future__ import annotations

from typing import Any

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.parity import Forced, ParityEvidence
from pytest_infercheck.checks.parity.judge import RULE, past_the_tie
from pytest_infercheck.verdict.gate import Violation
from pytest_infercheck.verdict.waiver import Waiver
from tests.unit.test_parity_ties import NEAR3, PROMPT, REF3, STREAM, gen

COVERS = frozenset({"outputs-differ"})
CONTINUED = "the streamed path continued from the non-streamed tokens after the near-tie at"
# A reference of four tokens: the near-tie at token 1 (as REF3), then at token 2 it chose 7
# (-0.69) over 9 (-0.695), then 4.
REF4 = gen(
    [1, 5, 7, 4],
    [-0.01, -0.4, -0.69, -0.1],
    [{1: -0.01}, {5: -0.4, 6: -0.408}, {7: -0.69, 9: -0.695}, {4: -0.1}],
)
# Continued from [1, 5]: 9 (-0.69) over 7 (-0.695): a near-tie again (margins 0.005, 0.005).
NEAR_TAIL = gen([9], [-0.69], [{9: -0.69, 7: -0.695}])
# Continued from [1, 5, 7]: the reference's 4.
LAST = gen([4], [-0.1], [{4: -0.1}])


def past(ref: Generation, forced: list[Forced], tie_margin: float = 0.01) -> Any:
    e = ParityEvidence(PROMPT, "m@llama", STREAM, ref, NEAR3, tie_margin, forced=forced)
    assert e.comparison is not None
    return past_the_tie(e, e.comparison, COVERS, "decisive")


def test_near_ties_chained_through_continuations_are_judged_to_the_end() -> None:
    waiver, found, why = past(REF4, [Forced(2, NEAR_TAIL), Forced(3, LAST)])
    assert why == f"{CONTINUED} tokens [1, 2] reproduces its remaining 1 tokens"
    assert waiver == Waiver(RULE, COVERS, True, why) and found == []


def test_a_second_near_tie_at_the_references_last_token_leaves_nothing_to_judge() -> None:
    """REF4 cut to three tokens: the continued near-tie is at its last token, 2."""
    ref = gen(
        [1, 5, 7], [-0.01, -0.4, -0.69], [{1: -0.01}, {5: -0.4, 6: -0.408}, {7: -0.69, 9: -0.695}]
    )
    waiver, found, why = past(ref, [Forced(2, NEAR_TAIL)])
    assert why == (
        f"{CONTINUED} token 1 parts from them only at a near-tie at the non-streamed output's "
        "last token 2: nothing follows"
    )
    assert waiver == Waiver(RULE, COVERS, True, why) and found == []


def test_a_later_divergence_is_decisive_or_not_at_the_evidences_tie_margin() -> None:
    """Continued, 9 (-0.68) over 7 (-0.695): margins 0.005 (reference) and 0.015: decisive
    at tie_margin 0.01, a near-tie at 0.02 (then nothing continues from token 3)."""
    tail = gen([9], [-0.68], [{9: -0.68, 7: -0.695}])
    waiver, found, text = past(REF4, [Forced(2, tail)])
    assert waiver is None
    assert text == (
        f"{CONTINUED} token 1 parts from them: decisive at token 2 (margins: non-streamed "
        "0.005, streamed continued 0.015 nats; noise floor n/a)"
    )
    assert found == [Violation(text, "decisive-after-near-tie")]
    wide_waiver, wide_found, wide = past(REF4, [Forced(2, tail)], tie_margin=0.02)
    assert wide_found == [] and wide_waiver is not None and wide_waiver.judged_past is False
    assert wide == (
        "what follows the near-tie at tokens [1, 2] is not judged: no continuation of the "
        "streamed path from token 3 was had"
    )


def test_an_unlabelled_later_divergence_is_not_judged() -> None:
    """Continued, 9 with no top-k entry for the reference's 7: its margin unknown."""
    tail = gen([9], [-0.69], [{}])
    waiver, found, why = past(REF4, [Forced(2, tail)])
    assert found == []
    assert why == (
        f"{CONTINUED} token 1 parts from them unlabelled (unknown at token 2 (margins: "
        "non-streamed 0.005, streamed continued n/a nats; noise floor n/a)): not judged"
    )
    assert waiver == Waiver(RULE, COVERS, False, why)


def test_a_path_that_cannot_continue_says_so() -> None:
    e = ParityEvidence(PROMPT, "m@llama", STREAM, REF3, NEAR3, 0.01, unforced="no token ids")
    assert e.comparison is not None
    waiver, found, why = past_the_tie(e, e.comparison, COVERS, "decisive")
    assert why == "what follows the near-tie at token 1 is not judged: no token ids"
    assert waiver == Waiver(RULE, COVERS, False, why) and found == []
