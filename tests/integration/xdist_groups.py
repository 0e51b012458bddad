"""Which worker runs which integration module under ``pytest -n N --dist loadgroup``
(``scripts/test.sh``), in which order, and the node-id suffix that tells pytest-xdist.

- a module's tests stay together, so its module-scoped servers start once (group: the
  module's stem);
- every module that uses a session vLLM (:data:`SHARED_VLLM_FIXTURES`) goes to one worker
  (group ``vllm``), which starts each of them once;
- the other modules marked ``xdist_group`` start vLLMs of their own and go one after the
  other to one worker (group ``vllm-own``), so that at most the session's vLLMs and one
  module's run at once (about 3-4 GB each).

The two vLLM groups, then the longest other modules (:data:`LONG_MODULES`), are moved to the
front of the run: with ``--no-loadscope-reorder`` pytest-xdist hands groups out in
collection order (without it, by their number of tests), and a long group started last ends
the run alone. The tests outside ``tests/integration`` (one run holds them all) come last,
filling the workers as they free up; they keep no group, except those using a costly
session fixture (:data:`SHARED_FIXTURE_GROUPS`), which share one worker so that it is made
once, not once per worker.

pytest-xdist 3.8 groups by a suffix ``@<group>`` on each node id, which it writes as
``item._nodeid``; pytest 9.2 keeps the id in ``item._id`` (a structured ``NodeId``), so that
write no longer reaches the id and ``--dist loadgroup`` scattered every group over the
workers (measured: one module's tests on both workers, each starting its servers). The
suffix is written here on whichever attribute the running pytest reads.
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path

import pytest

SHARED_VLLM_FIXTURES = frozenset({"vllm_qwen2", "vllm_tiny_tool"})
"""The session's vLLM servers: under ``-n N`` each worker that uses one starts its own."""


FIRST_GROUPS = ("vllm", "vllm-own")
"""The chains of vLLM modules, the longest groups (15 and 13 minutes beside the rest)."""

LONG_MODULES = {
    "test_sampling_vllm_mlx": 340,
    "test_realistic_models": 138,
    "test_realistic_checks": 107,
    "test_sampling_mlx_server": 68,
    "test_sampling_false_failures_llama": 66,
    "test_parity_servers": 60,
    "test_stress_servers": 59,
}
"""Integration modules over a minute, with their seconds in one run of the suite on two workers
(``bench/durlog.py``, 2026-11-29): the order in which they start, after :data:`FIRST_GROUPS`."""

SHARED_FIXTURE_GROUPS = {"quickstart_run": "quickstart"}
"""Session fixtures outside the integration folder that take long to make (the quickstart
run: 37 s), with the group of every test using one: under ``-n 3`` each worker that ran one
of them made its own."""

INTEGRATION = Path(__file__).parent

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
"""The default of ``scripts/build_llama_server.sh`` (``INFERCHECK_LLAMA_CPP_PYTHON_VERSION``)."""

LLAMA_SERVER_FLAVOUR = "o1glue"
"""``FLAVOUR`` of ``scripts/build_llama_server.sh``: its binary is cached in
``llama-server/<version>-<flavour>/`` (a cache of another flavour is not reused)."""


def start_order(group: str, integration: bool, waits: bool = False) -> tuple[int, int, int]:
    """Sort key of an item's group: the vLLM groups, then the integration modules longest
    first (:data:`LONG_MODULES`, the rest as 0 s), then every test outside the integration
    folder. ``waits``: the item's module needs a server still being built (a cold machine):
    it goes after the modules that need none, within its vLLM chain or among the other
    integration modules, so that no worker waits on the build while there is other work."""
    if not integration:
        return (2, 0, 0)
    if group in FIRST_GROUPS:
        return (0, FIRST_GROUPS.index(group), waits)
    return (1, waits, -LONG_MODULES.get(group, 0))


def llama_server_built() -> bool:
    """Whether ``scripts/build_llama_server.sh`` has built llama-server (its cached binary
    exists): on a cold machine the modules needing it wait for the build."""
    root = Path(os.environ.get("INFERCHECK_CACHE") or Path.home() / ".cache" / "pytest-infercheck")
    version = os.environ.get("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", LLAMA_CPP_PYTHON_VERSION)
    folder = f"{version}-{LLAMA_SERVER_FLAVOUR}"
    return os.access(root / "llama-server" / folder / "llama-server", os.X_OK)


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


def assign_groups(
    config: pytest.Config,
    items: list[pytest.Item],
    root: Path = INTEGRATION,
    unbuilt: frozenset[str] = frozenset(),
) -> None:
    """Mark every integration item (under ``root``) with its module's group, and every other
    item using a fixture of :data:`SHARED_FIXTURE_GROUPS` with that fixture's group, and,
    under ``--dist loadgroup`` (a worker's ``config.option.loadgroup``), give its node id
    the group's suffix; reorder
    ``items`` in place by :func:`start_order` (stable: a module's tests keep their order), a
    module with an item using a fixture of ``unbuilt`` (a server still being built) after
    the others of its tier."""
    modules: dict[Path, list[pytest.Item]] = defaultdict(list)
    for item in items:
        if item.path.is_relative_to(root):
            modules[item.path].append(item)
    loadgroup = bool(getattr(config.option, "loadgroup", False))
    groups: dict[int, str] = {}  # by id(item)

    def join(item: pytest.Item, group: str) -> None:
        item.add_marker(pytest.mark.xdist_group(group))  # the item's own: the closest
        groups[id(item)] = group
        if loadgroup:
            _set_id(item, grouped_id(item.nodeid, group))

    for module_items in modules.values():
        group = module_group(module_items)
        for item in module_items:
            join(item, group)
    integration = set(groups)
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        shared = next(
            (SHARED_FIXTURE_GROUPS[f] for f in fixtures if f in SHARED_FIXTURE_GROUPS), ""
        )
        if shared and id(item) not in integration:
            join(item, shared)
    waiting = {
        id(item)
        for module_items in modules.values()
        if any(unbuilt & set(getattr(i, "fixturenames", ())) for i in module_items)
        for item in module_items
    }
    items.sort(
        key=lambda item: start_order(
            groups.get(id(item), ""), id(item) in integration, id(item) in waiting
        )
    )
