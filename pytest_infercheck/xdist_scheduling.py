"""Keep each check x suite on one xdist worker, so its baseline is generated once there.

Infercheck node ids look like ``file.yaml::check[...]::suite::item``; everything up to the
suite is one scope. Any other test is its own scope, which is plain ``--dist load``.
"""

from __future__ import annotations

from typing import Any

YAML_SUFFIXES = (".yaml", ".yml")


def scope_of(nodeid: str) -> str:
    """``a.yaml::compare(x-vs-y)::reasoning::r017`` -> ``a.yaml::compare(x-vs-y)::reasoning``."""
    parts = nodeid.split("::")
    if len(parts) >= 4 and parts[0].endswith(YAML_SUFFIXES):
        return "::".join(parts[:3])
    return nodeid


def make_scheduler(config: Any, log: Any) -> Any:
    from xdist.scheduler import LoadScopeScheduling

    class CheckSuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

    return CheckSuiteScheduling(config, log)
