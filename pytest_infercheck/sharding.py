"""``--infercheck-shard i/n``: a deterministic share of the items, for runs split across CI jobs.

An item belongs to shard ``1 + H(key) mod n``, where H is the first 8 bytes of the SHA-256 of
its node id without parameters (``infercheck.yaml::sweep(bf16)::addition::s01`` for
``...::s01[q4]``): stable across machines and Python processes (unlike ``hash()``), and every
side of one prompt lands in the same shard, so a sweep's or diff's baseline is generated once.

Aggregate items stay in every shard that keeps at least one other item of their suite,
aggregate only that shard's items and defer their suite gates (a part of the suite cannot
judge a gate on the whole); ``pytest-infercheck report`` merges the shards' results,
recomputes every aggregate from the union of the item records and judges the gates there.
Selection is applied after ``-k``/``-m`` (``trylast``) and the same on every xdist worker.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

import pytest

from .collect import is_aggregate
from .nodeid import NodeId

SHARD_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (1-based)."""

    index: int
    count: int

    def to_dict(self) -> dict[str, int]:
        return {"index": self.index, "count": self.count}


def parse_shard(text: str) -> Shard:
    """``"2/3"`` -> ``Shard(2, 3)``; a usage error for anything but ``i/n`` with 1 <= i <= n."""
    match = SHARD_PATTERN.match(text)
    if match is None:
        raise pytest.UsageError(f"--infercheck-shard must look like i/n (e.g. 2/3), got {text!r}")
    index, count = int(match[1]), int(match[2])
    if count < 1 or not 1 <= index <= count:
        raise pytest.UsageError(
            f"--infercheck-shard {text}: need 1 <= i <= n (shards are numbered from 1)"
        )
    return Shard(index, count)


def shard_of(nodeid: str, count: int) -> int:
    """The 1-based shard of ``nodeid``: ``1 + int(sha256(key)[:8]) mod count``, where ``key``
    is the node id without its ``[parameters]``."""
    node = NodeId.parse(nodeid)
    key = node.unparametrized if node is not None else nodeid.split("[", 1)[0]
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return 1 + int.from_bytes(digest[:8], "big") % count


def configured_shard(config: pytest.Config) -> Shard | None:
    """The shard given on the command line (validated), or None."""
    text = config.getoption("infercheck_shard", None)
    return None if text is None else parse_shard(text)


def split(items: list[pytest.Item], shard: Shard) -> tuple[list[pytest.Item], list[pytest.Item]]:
    """``(kept, deselected)``: items of this shard, plus each aggregate whose suite keeps at
    least one other item here."""
    kept = [
        i for i in items if not is_aggregate(i) and shard_of(i.nodeid, shard.count) == shard.index
    ]
    parents = {id(i.parent) for i in kept}
    keep_ids = {id(i) for i in kept} | {
        id(i) for i in items if is_aggregate(i) and id(i.parent) in parents
    }
    selected = [i for i in items if id(i) in keep_ids]
    deselected = [i for i in items if id(i) not in keep_ids]
    return selected, deselected


def select_shard(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect (``pytest_deselected``) the items outside the configured shard, in place."""
    shard = configured_shard(config)
    if shard is None:
        return
    selected, deselected = split(items, shard)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
