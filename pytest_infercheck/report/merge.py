"""Results files -> runs: the shards of one run merged into one results document.

Files with a ``run.shard`` are grouped by ``(run_id, shard count)``; every other file is a run
of its own. Merging a group:

- items: the union; the same node id in two shards is an error (the shards overlap), except
  aggregates, which every shard has (each over its own items);
- every aggregate is recomputed by its kind's
  :attr:`~..checks.framework.kind.CheckKind.summarize` (the function the live run calls) from the
  union of the item records with the check's thresholds, and its suite gates, which the
  shards deferred, are judged on the union, so the merged numbers and verdicts are those of
  the unsharded run (up to float summation order);
- an aggregate whose kind is unknown (a newer plugin's) or whose records cannot be read (an
  older file, every shard's aggregate errored) keeps each shard's data under
  ``data["shards"]`` (with a warning), its outcome the worst; when its shards deferred their
  gates it is an ``error``: its gates cannot be judged;
- missing shards are a warning; a matrix that differs between shards is an error;
- run: earliest start, latest finish, wall time between them, ``shard: null``,
  ``merged_shards`` (the indexes merged), exit status 1 when a merged gate fails.

:func:`failed_gates` lists the merged aggregates that failed: ``pytest-infercheck report``
exits 1 when there is one, so the merge of a sharded run is its gate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from ..checks.framework.items import RecordedItem, summarize_items
from ..checks.framework.kind import CheckKind
from ..checks.framework.outcome import BACKEND_ERROR
from ..checks.registry import kind_named
from ..metrics.degenerate import DegenerateScan
from ..records import load_record, plain_data
from .results import ItemModel, item_sort_key

OUTCOME_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
FAILING = ("failed", "error")


class MergeError(Exception):
    """Results files that cannot be merged into one run."""


def merge_results(
    named: list[tuple[str, dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[str]]:
    """``(runs, warnings)`` from ``(file name, results)`` pairs, runs in first-seen order."""
    groups: dict[object, list[tuple[str, dict[str, Any]]]] = {}
    for index, (name, results) in enumerate(named):
        shard = results["run"]["shard"]
        key: object = index if shard is None else (results["run"]["run_id"], shard["count"])
        groups.setdefault(key, []).append((name, results))
    runs: list[dict[str, Any]] = []
    warnings: list[str] = []
    for files in groups.values():
        if files[0][1]["run"]["shard"] is None:
            runs.append(files[0][1])
        else:
            run, notes = merge_shards(files)
            runs.append(run)
            warnings += notes
    return runs, warnings


def merge_shards(files: list[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[str]]:
    """One results document from the shards of one run (see the module docstring)."""
    run_id = files[0][1]["run"]["run_id"]
    count = files[0][1]["run"]["shard"]["count"]
    warnings: list[str] = []
    by_index: dict[int, str] = {}
    for name, results in files:
        index = results["run"]["shard"]["index"]
        if index in by_index:
            raise MergeError(
                f"{by_index[index]} and {name} are both shard {index}/{count} of run {run_id}"
            )
        by_index[index] = name
    missing = sorted(set(range(1, count + 1)) - set(by_index))
    if missing:
        listed = ", ".join(f"{i}/{count}" for i in missing)
        warnings.append(f"run {run_id}: shard(s) {listed} missing; its numbers cover the others")
    matrices = _merged_matrices(files, run_id)
    items = _merged_items(files, run_id, count, warnings)
    engines: dict[str, Any] = {}
    for _, results in files:
        engines.update(results["engines"])
    runs = [r["run"] for _, r in files]
    started = min(runs, key=lambda r: _time(r["started"]))["started"]
    finished = max(runs, key=lambda r: _time(r["finished"]))["finished"]
    codes = [r["exitstatus"] for r in runs]
    exitstatus = max((c for c in codes if c != 5), default=5)  # 5: no tests collected
    if exitstatus in (0, 5) and any(
        i["role"] == "aggregate" and i["outcome"] in FAILING for i in items
    ):
        exitstatus = 1  # a gate the shards deferred fails on the union: the run failed
    run = {
        **runs[0],
        "started": started,
        "finished": finished,
        "duration_s": (_time(finished) - _time(started)).total_seconds(),
        "shard": None,
        "merged_shards": sorted(by_index),
        "exitstatus": exitstatus,
    }
    merged = {**files[0][1], "run": run, "matrices": matrices, "engines": engines, "items": items}
    return merged, warnings


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _merged_matrices(files: list[tuple[str, dict[str, Any]]], run_id: str) -> dict[str, Any]:
    matrices: dict[str, Any] = {}
    seen_in: dict[str, str] = {}
    for name, results in files:
        for path, data in results["matrices"].items():
            if path in matrices and matrices[path] != data:
                raise MergeError(
                    f"{seen_in[path]} and {name} (run {run_id}) have different contents for "
                    f"the matrix {path}: not shards of one run (pass the same "
                    "--infercheck-run-id only to shards of one run)"
                )
            matrices[path] = data
            seen_in.setdefault(path, name)
    return matrices


def _merged_items(
    files: list[tuple[str, dict[str, Any]]], run_id: str, count: int, warnings: list[str]
) -> list[dict[str, Any]]:
    items: dict[str, dict[str, Any]] = {}
    owner: dict[str, str] = {}
    aggregates: dict[str, list[tuple[int, dict[str, Any]]]] = {}
    for name, results in files:
        index = results["run"]["shard"]["index"]
        for item in results["items"]:
            nodeid = item["nodeid"]
            if item["role"] == "aggregate":
                aggregates.setdefault(nodeid, []).append((index, item))
            elif nodeid in items:
                raise MergeError(
                    f"{nodeid} is in both {owner[nodeid]} and {name} (run {run_id}): shards "
                    "must not overlap"
                )
            else:
                items[nodeid] = item
                owner[nodeid] = name
    prompts = sorted(items.values(), key=item_sort_key)
    for nodeid, shards in aggregates.items():
        kind = kind_named(shards[0][1]["kind"])
        merged = None
        if kind is not None:
            merged = summarized(kind, nodeid, shards, prompts)
        if merged is None:
            warnings.append(
                f"run {run_id}: {nodeid} ({shards[0][1]['kind']}) is not recomputed across "
                "shards; each shard's aggregate is kept under data.shards"
            )
            merged = _kept_per_shard(nodeid, shards, count)
        items[nodeid] = merged
    return sorted(items.values(), key=item_sort_key)


def summarized(
    kind: CheckKind,
    nodeid: str,
    shards: Sequence[tuple[int, dict[str, Any]]],
    items: Sequence[dict[str, Any]],
) -> dict[str, Any] | None:
    """The aggregate item ``nodeid`` of merged shards: ``kind.summarize`` of the union of its
    check x suite's items (an errored item with its error), with the thresholds the shards
    recorded and the context of the shards' aggregates (their ``engines`` united); its
    outcome ``error`` when a shard's aggregate errored, else ``failed`` when a gate breaks.
    None when no shard's aggregate or some item's record cannot be read."""
    typed = [ItemModel.model_validate(item) for _, item in shards]
    suite = typed[0].suite_id
    try:
        contexts: list[Any] = [load_record(kind.spec.context, a.data) for a in typed if a.data]
        thresholds = kind.spec.thresholds.model_validate(typed[0].thresholds)
        recorded = [
            _recorded(kind, item)
            for item in map(ItemModel.model_validate, items)
            if item.suite_id == suite and item.role != "aggregate"
        ]
    except (ValueError, KeyError):
        return None
    if not contexts:
        return None
    engines: dict[str, Any] = {}
    for context in contexts:
        engines.update(context.engines)
    context = dataclasses.replace(contexts[0], engines=engines)
    summary = summarize_items(kind, [r for r in recorded if r is not None], thresholds, context)
    errored = [a for a in typed if a.outcome == "error"]
    violations = summary.violations
    outcome = "error" if errored else "failed" if violations else "passed"
    longrepr = "\n".join(str(a.longrepr) for a in errored) if errored else None
    identity = {k: v for k, v in shards[0][1].items() if k != "gates_deferred_to"}
    return {
        **identity,
        "outcome": outcome,
        "duration_s": sum(a.duration_s for a in typed),
        "worker": None,
        "longrepr": longrepr or "\n".join(violations) or None,
        "violations": violations,
        "data": plain_data(summary.record),
        **({} if summary.degenerate is None else {"degenerate": plain_data(summary.degenerate)}),
    }


def _recorded(kind: CheckKind, item: ItemModel) -> RecordedItem | None:
    """An item of a results file as :attr:`CheckKind.summarize` reads it: its typed record,
    or, for an item that failed or errored with no record (its engine failed, in its setup
    or its call), its error; None for one that was skipped."""
    if item.data:
        record: Any = load_record(kind.spec.records[item.role], item.data)
        scan = None if item.degenerate is None else load_record(DegenerateScan, item.degenerate)
        return RecordedItem(
            item.role, item.name, record, degenerate=scan, violations=tuple(item.violations)
        )
    if item.outcome in FAILING:
        error = (item.longrepr or item.outcome).removeprefix(BACKEND_ERROR)
        return RecordedItem(item.role, item.name, None, error)
    return None


def _kept_per_shard(
    nodeid: str, shards: list[tuple[int, dict[str, Any]]], count: int
) -> dict[str, Any]:
    """An aggregate merged as it was: each shard's data and verdict, side by side. When the
    shards deferred its suite gates, nobody can judge them: an ``error`` saying so."""
    first = shards[0][1]
    engines: dict[str, Any] = {}
    for _, item in shards:
        engines.update(item["data"].get("engines") or {})
    worst = max((item["outcome"] for _, item in shards), key=OUTCOME_RANK.__getitem__)
    reprs = [f"shard {i}/{count}: {item['longrepr']}" for i, item in shards if item["longrepr"]]
    if any(item.get("gates_deferred_to") for _, item in shards):
        worst = "error"
        reprs.append(
            "the shards deferred this aggregate's suite gates to the merge, and its records "
            "cannot be recomputed: the gates are not judged"
        )
    identity = {k: v for k, v in first.items() if k != "gates_deferred_to"}
    return {
        **identity,
        "outcome": worst,
        "duration_s": sum(item["duration_s"] for _, item in shards),
        "worker": None,
        "longrepr": "\n".join(reprs) or None,
        "violations": [f"shard {i}/{count}: {v}" for i, item in shards for v in item["violations"]],
        "data": {
            "engines": engines,
            "shards": [{"shard": f"{i}/{count}", **item["data"]} for i, item in shards],
        },
    }


def failed_gates(runs: list[dict[str, Any]]) -> list[str]:
    """``<node id>: <violation>`` for every item and aggregate of merged shards that failed
    (its reason, for one that errored): what the merge judged, the aggregates' gates by
    recomputing them, the items as their shards judged them (aggregates first)."""
    lines: list[str] = []
    for role_is_aggregate in (True, False):
        for run in runs:
            if not run["run"].get("merged_shards"):
                continue
            for item in run["items"]:
                if (item["role"] == "aggregate") != role_is_aggregate:
                    continue
                if item["outcome"] not in FAILING:
                    continue
                reasons = item["violations"] or [str(item["longrepr"] or item["outcome"])]
                lines += [f"{item['nodeid']}: {reason}" for reason in reasons]
    return lines
