"""Which worker runs which integration module under ``pytest -n N --dist loadgroup``
(``scripts/test.sh``), and the node-id suffix that tells pytest-xdist.

- a module's tests stay together, so its module-scoped servers start once (group: the
  module's stem);
- every module that uses a session vLLM (:data:`SHARED_VLLM_FIXTURES`) goes to one worker
  (group ``vllm``), which starts each of them once;
- the other modules marked ``xdist_group`` start vLLMs of their own and go one after the
  other to one worker (group ``vllm-own``), so that at most the session's vLLMs and one
  module's run at once (about 3-4 GB each).

pytest-xdist 3.8 groups by a suffix ``@<group>`` on each node id, which it writes as
``item._nodeid``; pytest 9.2 keeps the id in ``item._id`` (a structured ``NodeId``), so that
write no longer reaches the id and ``--dist loadgroup`` scattered every group over the
workers (measured: one module's tests on both workers, each starting its servers). The
suffix is written here on whichever attribute the running pytest reads.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

SHARED_VLLM_FIXTURES = frozenset({"vllm_qwen2", "vllm_tiny_tool"})
"""The session's vLLM servers: under ``-n N`` each worker that uses one starts its own."""


def module_group(module_items: list[pytest.Item]) -> str:
    """The group of one module's tests (rules in the module docstring)."""
    shared = any(
        SHARED_VLLM_FIXTURES & set(getattr(item, "fixturenames", ())) for item in module_items
    )
    marked = any(item.get_closest_marker("xdist_group") is not None for item in module_items)
    return "vllm" if shared else "vllm-own" if marked else module_items[0].path.stem


def grouped_id(nodeid: str, group: str) -> str:
    """``nodeid`` with the suffix ``@group``, any earlier suffix replaced. A suffix is an ``@``
    after the last ``]`` (pytest-xdist's own reading: ``test[a@b]`` has none)."""
    at = nodeid.rfind("@")
    base = nodeid[:at] if at > nodeid.rfind("]") else nodeid
    return f"{base}@{group}"


def _set_id(item: pytest.Item, nodeid: str) -> None:
    if hasattr(item, "_id"):  # pytest >= 9.2: the id is a NodeId, whose str is the nodeid
        item._id = type(item._id).parse(nodeid)
    else:
        item._nodeid = nodeid


def assign_groups(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every item with its module's group and, under ``--dist loadgroup`` (a worker's
    ``config.option.loadgroup``), give its node id the group's suffix."""
    modules: dict[Path, list[pytest.Item]] = defaultdict(list)
    for item in items:
        modules[item.path].append(item)
    loadgroup = bool(getattr(config.option, "loadgroup", False))
    for module_items in modules.values():
        group = module_group(module_items)
        for item in module_items:
            item.add_marker(pytest.mark.xdist_group(group))  # the item's own: the closest
            if loadgroup:
                _set_id(item, grouped_id(item.nodeid, group))
