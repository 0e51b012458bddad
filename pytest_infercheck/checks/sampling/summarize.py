"""The ``sampling`` summarize facet: the items' records to the aggregate (pure; the live run
and ``pytest-infercheck report`` over shards call it alike).

Holm's step-down procedure (:func:`~pytest_infercheck.metrics.sampling.holm`) at ``alpha``
over the p-values of every compared position item: sort them ``p_(1) <= ... <= p_(m)`` and
reject ``p_(i)`` while ``p_(i) < alpha / (m - i + 1)``. Each item was already judged alone
at ``alpha / m`` (Holm's first step, :mod:`.evidence`); the aggregate fails, naming them, for
the items Holm rejects beyond those. ``max_detectable_tv`` is the largest of the compared
items' detectable total-variation distances: each would have seen a departure that large.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...metrics.sampling import holm
from ..framework.items import RecordedItem, Summary
from ..framework.target import TargetContext
from .records import SamplingAggregate
from .spec import SamplingThresholds

SHOWN = 5


def summarize(
    items: Sequence[RecordedItem], thresholds: SamplingThresholds, context: TargetContext
) -> Summary:
    positions = [
        (i.name, i.record, bool(i.violations))
        for i in items
        if i.role == "position" and i.record is not None
    ]
    compared = sorted(
        ((n, r, failed) for n, r, failed in positions if r.p_value is not None),
        key=lambda x: x[0],
    )  # by name: a merge of shards holds the items in another order
    rejected = holm([r.p_value for _, r, _ in compared], thresholds.alpha) if compared else []
    names = [n for (n, _, _), rej in zip(compared, rejected, strict=True) if rej]
    beyond = [
        (n, r) for (n, r, failed), rej in zip(compared, rejected, strict=True) if rej and not failed
    ]
    tvs = [r.detectable_tv for _, r, _ in compared if r.detectable_tv is not None]
    seeds = sum(1 for i in items if i.role == "seed")
    data = SamplingAggregate(
        target=context.target,
        positions=len(positions),
        compared=len(compared),
        alpha=thresholds.alpha,
        holm_rejected=names,
        min_p_value=min((r.p_value for _, r, _ in compared), default=None),
        max_detectable_tv=max(tvs) if tvs else None,
        seeds=seeds,
        engines=context.engines,
    )
    violations = []
    if beyond:
        shown = ", ".join(f"{n} (p {r.p_value:.3g})" for n, r in beyond[:SHOWN])
        more = f", ... {len(beyond) - SHOWN} more" if len(beyond) > SHOWN else ""
        violations.append(
            f"Holm's step-down at alpha {thresholds.alpha:g} over {len(compared)} positions "
            f"rejects {len(beyond)} more: {shown}{more}"
        )
    tv = "-" if data.max_detectable_tv is None else f"{data.max_detectable_tv:.3f}"
    text = (
        f"{context.target}: {len(compared)}/{len(positions)} positions tested, Holm rejects "
        f"{len(names)} at alpha {thresholds.alpha:g}; every tested position detects a "
        f"departure of total variation {tv} (80% power); {seeds} seed items"
    )
    properties: list[tuple[str, Any]] = [
        ("infercheck_positions", len(positions)),
        ("infercheck_holm_rejected", len(names)),
        ("infercheck_max_detectable_tv", data.max_detectable_tv),
    ]
    return Summary(data, violations, text, properties)
