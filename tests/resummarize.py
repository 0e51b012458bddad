"""A kind's aggregate recomputed from a results file: its ``summarize`` of the file's item
records (what ``pytest-infercheck report`` does for merged shards), for the tests that hold it
equal to the aggregate the live run computed."""

from __future__ import annotations

import math
from typing import Any

from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.report.merge import summarized


def aggregates(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A results file's aggregate items by node id."""
    return {i["nodeid"]: i for i in results["items"] if i["role"] == "aggregate"}


def resummarized(results: dict[str, Any], nodeid: str, *, reverse: bool = False) -> dict[str, Any]:
    """The aggregate ``nodeid`` recomputed by its kind's ``summarize`` from the file's item
    records (with the aggregate's thresholds and context, as a merge of one shard); the
    items in the file's order, or reversed (``reverse``): a summary must not depend on it."""
    aggregate = aggregates(results)[nodeid]
    kind = kind_named(aggregate["kind"])
    assert kind is not None, aggregate["kind"]
    items = [i for i in results["items"] if i["role"] != "aggregate"]
    merged = summarized(kind, nodeid, [(1, aggregate)], items[::-1] if reverse else items)
    assert merged is not None, f"{nodeid}: its records cannot be read back"
    return merged


def assert_same_aggregate(
    got: dict[str, Any], want: dict[str, Any], *, ignore: frozenset[str] = frozenset()
) -> None:
    """``got`` has ``want``'s outcome, violations and data (floats equal up to the order of
    summation; keys in ``ignore`` left out at any depth)."""
    assert (got["outcome"], got["violations"]) == (want["outcome"], want["violations"])
    assert_same_data(got["data"], want["data"], ignore=ignore)


def assert_same_data(got: Any, want: Any, *, ignore: frozenset[str], at: str = "data") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) - ignore == set(want) - ignore, at
        for key in set(want) - ignore:
            assert_same_data(got[key], want[key], ignore=ignore, at=f"{at}.{key}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), at
        for n, (a, b) in enumerate(zip(got, want, strict=True)):
            assert_same_data(a, b, ignore=ignore, at=f"{at}[{n}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, float) and math.isclose(got, want, rel_tol=1e-12), at
    else:
        assert got == want, at
