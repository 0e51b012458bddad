"""cache-pollution's judge facet called directly on hand-made outputs (found by the
mutation run, tests/unit/MUTATION.md): a dead server and the reference outputs that changed
after a hostile request, named with where each changed; the degenerate scan of every
reference output before and after; the failure kept in the record."""

from __future__ import annotations

from typing import Any

from pytest_infercheck.backends import Generation
from pytest_infercheck.checks.cache_pollution.evidence import HostileEvidence
from pytest_infercheck.checks.cache_pollution.judge import judge
from pytest_infercheck.checks.cache_pollution.records import CachePollutionContext, ChangedOutput
from pytest_infercheck.checks.cache_pollution.summarize import summarize
from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.verdict.gate import Violation

PLAN = ItemPlan("context-overflow", "hostile", "context-overflow")
SIX = Generation("46", [4, 6, 2], "stop")
SEVEN = Generation("47", [4, 7, 2], "stop")
LOOP = Generation(" the" * 16, [5] * 16, "length")
"""Token 5, 16 times: a loop of period 1 over the whole output."""


def test_a_dead_server_and_changed_outputs_fail_the_item_naming_each() -> None:
    """After the request p1 answers 47 (from token 1) and p3 loops (from token 0); p2 is
    unchanged; the server is not alive."""
    e = HostileEvidence(
        "m@x",
        "context-overflow",
        "HTTP 400: context too long",
        False,
        3,
        [("p1", SIX), ("p2", SIX), ("p3", SIX)],
        [("p1", SEVEN), ("p2", SIX), ("p3", LOOP)],
        failure="p9: HTTP 500",
    )
    judged = judge(PLAN, e, None)
    assert judged.violations == [
        Violation("the server is not alive after the context-overflow request", "pollution"),
        Violation(
            "2 of 3 reference outputs changed after the context-overflow request: p1, p3",
            "pollution",
        ),
    ]
    assert judged.record.changed == [
        ChangedOutput("p1", "46", "47", 1, "token"),
        ChangedOutput("p3", "46", " the" * 16, 0, "token"),
    ]
    assert judged.record.failure == "p9: HTTP 500"
    # Three outputs read before, three after; the loop is p3's after the request.
    scan = judged.degenerate
    assert scan is not None and scan.generations == 6
    (loop,) = scan.found
    assert (loop.pattern, loop.where, loop.covered) == (
        "loop",
        "the output of p3 after the context-overflow request",
        16,
    )


def test_without_outputs_after_the_request_nothing_changed() -> None:
    e = HostileEvidence("m@x", "disconnect", "sent", True, 2, [("p1", SIX), ("p2", SIX)], None)
    judged = judge(ItemPlan("disconnect", "hostile", "disconnect"), e, None)
    assert judged.violations == [] and judged.record.changed == []
    assert judged.record.failure is None
    assert judged.degenerate is not None and judged.degenerate.generations == 2


# -- the aggregate -----------------------------------------------------------------------------
def _hostile(kind: str, alive: bool, after: list[Any], failure: str | None = None) -> Any:
    e = HostileEvidence(
        "m@x", kind, f"{kind} answered", alive, 2, [("p1", SIX), ("p2", SIX)], after, failure
    )
    return judge(ItemPlan(kind, "hostile", kind), e, None).record


def test_the_aggregate_names_each_kind_of_finding_in_hostile_order() -> None:
    """context-overflow and invalid-utf8 killed the server, special-tokens and max-tokens-0
    changed p1, disconnect's reference prompts failed; listed in HOSTILE_KINDS order
    whatever the items' order."""
    changed = [("p1", SEVEN), ("p2", SIX)]
    same = [("p1", SIX), ("p2", SIX)]
    items = [
        RecordedItem("hostile", "disconnect", _hostile("disconnect", True, same, "p2: HTTP 500")),
        RecordedItem("hostile", "max-tokens-0", _hostile("max-tokens-0", True, changed)),
        RecordedItem("hostile", "invalid-utf8", _hostile("invalid-utf8", False, same)),
        RecordedItem("hostile", "special-tokens", _hostile("special-tokens", True, changed)),
        RecordedItem("hostile", "context-overflow", _hostile("context-overflow", False, same)),
    ]
    summary = summarize(items, None, CachePollutionContext("m@x", 2, {}))
    assert summary.violations == [
        "the server died after: context-overflow, invalid-utf8",
        "reference outputs changed after: special-tokens, max-tokens-0",
        "reference prompts failed after: disconnect",
    ]
    assert summary.text == "\n".join(
        [
            "m@x: hostile requests",
            "  context-overflow: context-overflow answered",
            "  invalid-utf8: invalid-utf8 answered",
            "  special-tokens: special-tokens answered",
            "  max-tokens-0: max-tokens-0 answered",
            "  disconnect: disconnect answered",
        ]
    )
    assert summary.properties == [
        ("infercheck_hostile", 5),
        ("infercheck_dead", 2),
        ("infercheck_polluted", 2),
    ]
