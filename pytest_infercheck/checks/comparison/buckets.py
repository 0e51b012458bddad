"""KL by bucket: a comparison's prompts grouped by their :attr:`~.prompt.PromptComparison.
bucket` (a generated suite's group: ``context-ladder``'s length, ``0.5x`` ... ``4x``).

Per bucket, in the order the buckets first appear among the prompts:

- ``kl_mean``: the mean of every compared position's KL of the bucket's prompts, pooled
  (``sum(kl) / positions``), NaN when any position's KL is NaN, None without positions;
- ``kl_max``: the largest of them (NaN likewise);
- ``top_flips``: positions whose two argmaxes differ (``same_top`` false), of ``positions``;
- ``n_failed``: prompts whose item failed; ``n_identical``: prompts with identical outputs.

Prompts without a bucket are left out; no bucket at all gives no statistics.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ...metrics.finite import strict_max, strict_mean
from .prompt import PromptComparison

__all__ = ["BucketStat", "bucket_line", "bucket_stats"]


@dataclass(frozen=True)
class BucketStat:
    """One bucket of a comparison's prompts (see the module docstring)."""

    bucket: str
    n_prompts: int
    n_failed: int
    n_identical: int
    positions: int
    """Positions compared (KL values) over the bucket's prompts."""
    kl_mean: float | None
    kl_max: float | None
    top_flips: int
    """Positions whose argmaxes differ, of the positions with a ``same_top`` reading."""


def bucket_stats(results: Iterable[PromptComparison], failed: Iterable[str]) -> list[BucketStat]:
    """The statistics of each bucket of ``results`` (see the module docstring); ``failed``:
    the prompt ids whose items failed."""
    failed_ids = set(failed)
    groups: dict[str, list[PromptComparison]] = {}
    for r in results:
        if r.bucket:
            groups.setdefault(r.bucket, []).append(r)
    out = []
    for bucket, members in groups.items():
        kl = [float(k) for r in members for k in r.kl_per_position]
        out.append(
            BucketStat(
                bucket=bucket,
                n_prompts=len(members),
                n_failed=sum(1 for r in members if r.prompt_id in failed_ids),
                n_identical=sum(1 for r in members if r.identical),
                positions=len(kl),
                kl_mean=strict_mean(kl) if kl else None,
                kl_max=strict_max(kl) if kl else None,
                top_flips=sum(1 for r in members for same in r.same_top if not same),
            )
        )
    return out


def _kl(value: float | None) -> str:
    """``-`` for None, ``NaN`` shown as it is, else three significant digits."""
    return "-" if value is None else format(value, ".3g")


def bucket_line(stats: Iterable[BucketStat]) -> str:
    """The terminal's one line: ``KL by length: 0.5x 1.2e-07 (0 flips, 0 failed) | 4x ...``
    (empty without buckets)."""
    parts = [
        f"{s.bucket} {_kl(s.kl_mean)} ({s.top_flips} flips, {s.n_failed} failed)" for s in stats
    ]
    return f"KL by length: {' | '.join(parts)}" if parts else ""
