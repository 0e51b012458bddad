"""The verdict harness: four invariants, for every kind in ``checks.registry.all_kinds()``,
on the fake engine (:mod:`.engine`) with faults drawn from one space (:mod:`.faults`).

1. No fault, no failure: on the faithful engine every item and the aggregate pass, with the
   kind's gates written (:func:`test_no_fault_no_failure`).
2. A fault under a written gate fails an item or the aggregate: for each fault kind, a fault
   drawn among the requests the faithful run made (any backend, path, prompt, occurrence,
   position; one request or every request of its path) that changed what came back fails the
   run, unless the kind's profile declares it blind to it with the reason; an HTTP fault
   fails it naming the server's status (:func:`test_a_fault_fails`).
3. No fault becomes a passing ``unsupported``, ``not exercised`` or ``unknown``: an item that
   passes under a fault does not say those words more often than it did on the faithful
   engine (checked on every faulty run of 2, blind or not).
4. Merged shards equal the unsharded run: the items' plain records split into 1 to 3 shards,
   merged by ``pytest-infercheck report``'s :func:`~pytest_infercheck.report.merge.
   merge_shards`, give the unsharded aggregate's outcome, violations and data
   (:func:`test_shards_merge_to_the_unsharded_run`).

Known verdict bugs of kinds not yet fixed are ``xfail(strict=True)`` with the issue's words
(:data:`KNOWN`): they flip to failures (XPASS) when the kind's fix lands, and the entry goes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import Phase, given, note, settings
from hypothesis import strategies as st

from pytest_infercheck.checks.registry import KIND_NAMES
from pytest_infercheck.report.merge import merge_shards
from tests.resummarize import assert_same_aggregate

from .faults import FAULT_KINDS, Fault, faults, targets
from .run import RunResult, run
from .verdicts import NoProfile, faithful, judge_fault, profile, setup_for

SEEDS = range(3)
"""The toy model's seeds a faulty run is drawn on (faithful runs are memoised per seed)."""

ISSUE = "issue 27: "
FINDING = "harness finding (issue 27's rule: {rule}): "
UNMEASURED = (
    ISSUE + "a written gate whose measure is unmeasured for an item fails that item naming "
    "the gate and why: an output without logprobs leaves {gate} unmeasured (for that run or "
    "side) and the item passes"
)
SOMETIMES: dict[tuple[str, str], str] = {}
"""(kind, fault kind) -> a verdict bug the kind has that CI's derandomized examples do not
reach (a random run may): ``xfail`` without ``strict``."""
KNOWN: dict[tuple[str, str], str] = {}
"""(kind, fault kind) -> the verdict bug its kind still has: the issue's words, or what the
harness found (each in the report to the lead)."""


def _profile(name: str) -> Any:
    try:
        return profile(name)
    except NoProfile as exc:
        pytest.fail(str(exc))


STRICT = bool(settings().derandomize)
"""Known bugs are strict xfails under the derandomized CI profile (the same examples every
run: a pass means the bug is fixed); a random run may miss a rare one, so not there."""


def _cases() -> Iterator[Any]:
    for name in KIND_NAMES:
        for fault in FAULT_KINDS:
            marks = []
            if (name, fault) in KNOWN:
                why = KNOWN[(name, fault)]
                marks.append(pytest.mark.xfail(strict=STRICT, raises=AssertionError, reason=why))
            elif (name, fault) in SOMETIMES:
                why = SOMETIMES[(name, fault)]
                marks.append(pytest.mark.xfail(strict=False, raises=AssertionError, reason=why))
            yield pytest.param(name, fault, id=f"{name}-{fault}", marks=marks)


NO_SHRINK = settings(phases=[Phase.explicit, Phase.generate])
"""A known bug's test stops at its first failing example (shrinking it is wasted time)."""


# -- 1 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", KIND_NAMES)
def test_no_fault_no_failure(name: str) -> None:
    kind_profile = _profile(name)

    @given(shape=st.sampled_from(kind_profile.shapes), seed=st.integers(0, 2**16))
    def check(shape: str, seed: int) -> None:
        result = run(setup_for(name, shape), None, seed)
        said = "\n".join(result.failures())
        assert not result.failed, f"{name} fails on the faithful {shape} engine:\n{said}"

    check()


# -- 2 and 3 -------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "fault_kind"), list(_cases()))
def test_a_fault_fails(name: str, fault_kind: str) -> None:
    kind_profile = _profile(name)
    options = [
        (shape, seed)
        for shape in kind_profile.shapes
        for seed in SEEDS
        if targets(fault_kind, faithful(name, shape, seed).log)
    ]
    if not options:
        pytest.skip(f"{name} makes no request that a {fault_kind} fault can change")

    verdicts: list[str] = []

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        shape, seed = data.draw(st.sampled_from(options), label="shape, seed")
        fault = data.draw(faults(fault_kind, faithful(name, shape, seed).log), label="fault")
        note(f"shape {shape}, seed {seed}")
        judged = judge_fault(name, shape, seed, fault)
        note(judged.report())
        verdicts.append(judged.verdict)
        assert not judged.skips, "\n".join(judged.skips)
        assert judged.verdict not in ("missed", "unnamed"), judged.report()

    known = (name, fault_kind) in KNOWN or (name, fault_kind) in SOMETIMES
    (NO_SHRINK(check) if known else check)()
    # a case whose every drawn fault changed nothing would pass having tested nothing
    assert set(verdicts) - {"not-applied"}, f"no {fault_kind} fault was applied: {verdicts}"


# -- 4 -------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", KIND_NAMES)
def test_shards_merge_to_the_unsharded_run(name: str) -> None:
    kind_profile = _profile(name)
    kinds = {
        (shape, seed): [f for f in FAULT_KINDS if targets(f, faithful(name, shape, seed).log)]
        for shape in kind_profile.shapes
        for seed in SEEDS
    }

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        shape, seed = data.draw(st.sampled_from(sorted(kinds)), label="shape, seed")
        base = faithful(name, shape, seed)
        fault: Fault | None = None
        fault_kind = data.draw(st.none() | st.sampled_from(kinds[(shape, seed)]), label="kind")
        if fault_kind is not None:
            fault = data.draw(faults(fault_kind, base.log), label="fault")
            note(fault.describe())
        result = base if fault is None else run(setup_for(name, shape), fault, seed)
        if result.aggregate.outcome is None:
            return  # the aggregate itself errored: nothing to merge
        count = data.draw(st.integers(1, 3), label="shards")
        shard_of = data.draw(
            st.lists(st.integers(1, count), min_size=len(result.items), max_size=len(result.items)),
            label="shard of each item",
        )
        merged = merged_aggregate(result, count, shard_of)
        want = result.plain(result.aggregate)
        want["outcome"] = "failed" if want["violations"] else "passed"
        assert_same_aggregate(merged, want)

    check()


def merged_aggregate(result: RunResult, count: int, shard_of: list[int]) -> dict[str, Any]:
    """The aggregate ``pytest-infercheck report`` merges from ``count`` shards holding the
    run's items as ``shard_of`` assigns them (each shard's aggregate deferred its gates)."""
    items = result.plain_items()
    files = []
    for index in range(1, count + 1):
        mine = [item for item, shard in zip(items, shard_of, strict=True) if shard == index]
        deferred = result.plain(
            result.aggregate, gates_deferred_to=f"{index}/{count}", outcome="passed"
        )
        deferred["violations"] = []
        doc = {
            "schema": "pytest-infercheck-results",
            "version": 2,
            "run": {
                "run_id": "harness",
                "shard": {"index": index, "count": count},
                "started": "2026-01-01T00:00:00+00:00",
                "finished": "2026-01-01T00:00:01+00:00",
                "exitstatus": 0,
            },
            "matrices": {},
            "engines": {},
            "items": [*mine, deferred],
        }
        files.append((f"shard-{index}.json", doc))
    merged, _ = merge_shards(files)
    aggregate: dict[str, Any] = next(i for i in merged["items"] if i["role"] == "aggregate")
    return aggregate
