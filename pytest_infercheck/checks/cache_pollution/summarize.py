"""cache-pollution's aggregate (pure): a function of the hostile items' records, the same for
a live run and a merge of shards (``pytest-infercheck report``).

Each record is judged again (:func:`~.judge.hostile_violations`), in the order of
:data:`~.spec.HOSTILE_KINDS`; its own findings name the hostile requests after which the
server died, a reference output changed, the outputs carried faults (by kind), or the
reference prompts failed. The framework adds its failed and errored items.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...metrics.faults import Fault, aggregate_faults
from ...specs import KindThresholds
from ..framework.items import RecordedItem, Summary, records_of
from .judge import hostile_violations
from .records import CachePollutionAggregate, CachePollutionContext
from .spec import HOSTILE_KINDS


def pollution_violations(
    dead: Sequence[str],
    polluted: Sequence[str],
    failed: Sequence[str],
    faulty: Sequence[tuple[str, Sequence[Fault]]],
    n_items: int,
) -> list[str]:
    """The aggregate's findings from the hostile kinds after which the server was dead, a
    reference output changed, its outputs carried faults (non-finite or mismatched logprobs,
    empty generations), or the item failed otherwise."""
    violations = []
    if dead:
        violations.append(f"the server died after: {', '.join(dead)}")
    if polluted:
        violations.append(f"reference outputs changed after: {', '.join(polluted)}")
    violations += aggregate_faults(faulty, n_items=n_items, item_unit="hostile requests")
    with_faults = {k for k, _ in faulty}
    other = [k for k in failed if k not in dead and k not in polluted and k not in with_faults]
    if other:
        violations.append(f"reference prompts failed after: {', '.join(other)}")
    return violations


def summarize(
    items: Sequence[RecordedItem], thresholds: KindThresholds, context: CachePollutionContext
) -> Summary:
    """The aggregate of the hostile items' records (see the module docstring)."""
    records = sorted(records_of(items, "hostile"), key=lambda r: HOSTILE_KINDS.index(r.hostile))
    errored = [item.name for item in items if item.record is None]
    dead = [r.hostile for r in records if not r.alive]
    polluted = [r.hostile for r in records if r.changed]
    failed = [r.hostile for r in records if hostile_violations(r)]
    record = CachePollutionAggregate(
        target=context.target,
        n_hostile=len(records) + len(errored),
        n_dead=len(dead),
        n_polluted=len(polluted),
        n_failed=len(failed) + len(errored),
        prompts=context.prompts,
        responses={r.hostile: r.response for r in records},
        engines=context.engines,
    )
    faulty = [(r.hostile, r.faults) for r in records if r.faults]
    violations = pollution_violations(dead, polluted, failed, faulty, len(items))
    text = "\n".join(f"  {r.hostile}: {r.response}" for r in records)
    properties: list[tuple[str, Any]] = [
        ("infercheck_hostile", record.n_hostile),
        ("infercheck_dead", len(dead)),
        ("infercheck_polluted", len(polluted)),
    ]
    return Summary(record, violations, f"{context.target}: hostile requests\n{text}", properties)
