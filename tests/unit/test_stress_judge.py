"""stress's judge facet called directly (found by the mutation run, tests/unit/MUTATION.md):
under ``fail_on: decisive`` each near-tie output's judgement lands on its own mismatch (and
only a slot the level has), the waiver names its rule, and the level's degenerate scan is
the item's. The level is test_stress_ties.py's: request 0 (NEAR) parts from the reference
at a near-tie at token 1, request 1 (FAR) decisively, request 2 is the reference."""

from __future__ import annotations

import dataclasses

from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.stress.judge import DECISIVE_RULE, judge
from tests.unit.test_stress_ties import evidence, thresholds

PLAN = ItemPlan("c3", "level", "c3")


def test_a_judged_near_tie_lands_on_its_own_mismatch() -> None:
    e = evidence(True)
    judged = judge(PLAN, e, thresholds(min_consistency=0.6, fail_on="decisive"))
    near, far = judged.record.mismatches
    assert near.after_tie is not None and near.after_tie.clean
    assert near.after_tie.why == (
        "judged past the near-tie at token 1 by teacher forcing: 0 later tokens, each within "
        "tie_margin 0.01 of its engine's own choice"
    )
    assert far.after_tie is None
    (waiver,) = judged.waivers
    assert (waiver.rule, waiver.judged_past) == (DECISIVE_RULE, True)
    assert judged.record.violations == []
    assert judged.degenerate == e.level.degenerate
    # The evidence's own level is left as it was.
    assert e.level.mismatches[0].after_tie is None


def test_a_near_tie_without_a_slot_of_the_level_is_judged_but_lands_nowhere() -> None:
    for slot in (None, 2):
        e = evidence(True)
        e.near_ties = [dataclasses.replace(e.near_ties[0], slot=slot)]
        judged = judge(PLAN, e, thresholds(min_consistency=0.6, fail_on="decisive"))
        assert [m.after_tie for m in judged.record.mismatches] == [None, None]
        assert [w.judged_past for w in judged.waivers] == [True]
