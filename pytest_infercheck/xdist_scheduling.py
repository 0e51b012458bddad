"""Keep each check x suite on one xdist worker, so its baseline is generated once there;
spread stress items over the workers, so they load one shared server at the same time.

Infercheck node ids look like ``file.yaml::check(...)::suite::item``; everything up to the
suite is one scope, except for ``stress(...)`` checks, where every item (a concurrency level,
or the aggregate) is its own scope: the stress check shares its reference and level results
across workers through files (see :mod:`.checks.stress`), not through one worker's memory.
Any other test is its own scope, which is plain ``--dist load``.
"""

from __future__ import annotations

from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")
SPREAD_KINDS = ("stress(",)


def scope_of(nodeid: str) -> str:
    """``a.yaml::compare(x-vs-y)::reasoning::r017`` -> ``a.yaml::compare(x-vs-y)::reasoning``;
    ``a.yaml::stress(q4)::reasoning::c8`` stays as it is."""
    parts = nodeid.split("::")
    if len(parts) >= 4 and parts[0].endswith(YAML_SUFFIXES):
        if parts[1].startswith(SPREAD_KINDS):
            return nodeid
        return "::".join(parts[:3])
    return nodeid


def make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class CheckSuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return CheckSuiteScheduling(config, log)
