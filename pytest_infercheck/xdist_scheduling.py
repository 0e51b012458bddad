"""Keep each check x suite on one xdist worker, so its baseline is generated once there;
spread stress items over the workers, so they load one shared server at the same time.

Infercheck node ids look like ``file.yaml::check(...)::suite::item``; everything up to the
suite is one scope, except for checks of a kind that spreads over the workers
(:attr:`.checks.framework.kind.CheckKind.spread_over_workers`: stress), where every item (a
concurrency level, or the aggregate) is its own scope: such a kind shares its work across
workers through files, not through one worker's memory.
Any other test is its own scope, which is plain ``--dist load``.
"""

from __future__ import annotations

from typing import Any

from .checks.registry import kind_named
from .nodeid import NodeId


def scope_of(nodeid: str) -> str:
    """``a.yaml::compare(x-vs-y)::reasoning::r017`` -> ``a.yaml::compare(x-vs-y)::reasoning``;
    ``a.yaml::stress(q4)::reasoning::c8`` stays as it is."""
    node = NodeId.parse(nodeid)
    if node is None:
        return nodeid
    kind = kind_named(node.kind)
    if kind is not None and kind.spec.spread_over_workers:
        return nodeid
    return node.suite_id


def make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class CheckSuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return CheckSuiteScheduling(config, log)
