"""The stress check on in-process mlx-lm (levels as real batches through ``generate_batch``),
alone and under ``-n 2``: the levels spread over the workers, each level is measured once
per run (the aggregate reuses what the level items published), and the controller prints
every level in one table."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.report.results import load_results
from tests.fault_matrix import write_project
from tests.faults import Fault, Mode, backend_name
from tests.resummarize import aggregates, assert_same_aggregate, resummarized

from .helpers import junit_properties

STRESS = """\
  - stress: {target: bf16, levels: [1, 4, 16], repeats: 2}
    min_consistency: 1.0
    max_error_rate: 0.0
    flips: {max_rate: 0.0, gate: point}
"""

# The controller's view of every item record (what xdist shipped back on the reports).
RECORDS_CONFTEST = """
import json

def pytest_runtest_logreport(report):
    record = getattr(report, "infercheck", None)
    if report.when == "call" and record is not None:
        with open("records.jsonl", "a") as out:
            out.write(json.dumps({"nodeid": report.nodeid, **record}) + "\\n")
"""


def records(path: Path) -> dict[str, dict[str, Any]]:
    lines = (path / "records.jsonl").read_text().splitlines()
    return {r["name"]: r for r in map(json.loads, lines)}


def test_in_process_levels_are_real_batches_and_pass(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(STRESS)
    pytester.makeconftest(RECORDS_CONFTEST)
    result = pytester.runpytest("-q", "--junitxml=out.xml")
    result.assert_outcomes(passed=4)
    recs = records(pytester.path)
    # 8 prompts: 2 copies each at levels 1 and 4, 2 at level 16 too (16 requests exist)
    for name, in_flight in (("c1", 1), ("c4", 4), ("c16", 16)):
        data = recs[name]["data"]
        assert recs[name]["role"] == "level"
        assert data["requests"] == 16 and data["consistent"] == 16 and data["errors"] == {}
        assert data["max_in_flight"] == in_flight  # a batch of `level` prompts
        assert data["tokens_per_s"] > 0 and data["latency_p95_s"] >= data["latency_p50_s"]
    # one batch of 16: every request spans the whole call
    assert recs["c16"]["data"]["achieved_concurrency"] == pytest.approx(16.0)
    aggregate = recs["aggregate"]["data"]
    assert [d["level"] for d in aggregate["levels"]] == [1, 4, 16]
    assert aggregate["engines"]["bf16@local"]["kind"] == "mlx-lm"
    props = junit_properties(pytester.path / "out.xml")
    assert props["c4"]["infercheck_consistency"] == "1.0"
    result.stdout.fnmatch_lines(
        [
            "*infercheck summary*",
            "stress(bf16) addition on bf16@local: PASS",
            "*level*requests*errors*consistent*flips*p50 s*p95 s*tok/s*in flight*",
            "*c1 *16*0*16/16*0*1.00/1*PASS",
            "*c4 *16*0*16/16*0*/4*PASS",
            "*c16 *16*0*16/16*0*16.00/16*PASS",
        ]
    )


def test_a_flip_gate_no_level_can_meet_is_a_collection_error(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    # A flip gate on the Wilson upper bound that 16 requests (8 prompts x 2 repeats at c1)
    # cannot meet even with no flip (0/16 has an upper bound of 0.194 at 95%) would fail
    # every level whatever the engine does: a configuration error, at the limit's line.
    write_matrix(STRESS.replace("max_rate: 0.0, gate: point", "max_rate: 0.01"))
    result = pytester.runpytest("-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        "infercheck.yaml:10: checks[0].flips.max_rate 0.01 cannot pass with 16 requests at c1 "
        "(8 prompts x 2) (suite addition): the 95% Wilson upper bound at 0 flips is 0.1936; "
        "it needs at least 381 requests per level (prompts x repeats)"
    ) in result.stdout.lines


def test_under_xdist_levels_spread_and_are_measured_once(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(STRESS.replace("[1, 4, 16]", "[1, 2, 4, 8, 16]"))
    pytester.makeconftest(RECORDS_CONFTEST)
    result = pytester.runpytest_subprocess("-q", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    recs = records(pytester.path)
    levels = {name: recs[name]["data"] for name in ("c1", "c2", "c4", "c8", "c16")}
    assert {d["measured_by"] for d in levels.values()} == {"gw0", "gw1"}
    # the aggregate reused the published measurements (a second measurement would differ in
    # its timings), whichever worker made them
    assert recs["aggregate"]["data"]["levels"] == list(levels.values())
    result.stdout.fnmatch_lines(
        ["stress(bf16) addition on bf16@local: PASS", "*c1 *", "*c2 *", "*c4 *", "*c8 *", "*c16 *"]
    )


FAULTS = {  # a fault of the engine after its first answer -> what the aggregate names
    Fault.NAN_LOGPROBS: "non-finite logprob in",
    Fault.EMPTY: "empty generation in",
    Fault.SWAPPED_TOKEN: "outputs equal to their reference) 0 < min_consistency 1",
}


def test_the_aggregate_is_the_summary_of_the_level_records_and_names_every_fault(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """Each aggregate, recomputed by ``STRESS.summarize`` from the levels' records in the
    results file (in either order: a merge of shards sees them by node id), is the live one:
    verdict, violations and every number. A faithful engine passes; an engine that goes
    wrong after its first answer (the references) fails every level, and the aggregate names
    each level with the fault (the framework's ``N of M items failed`` line)."""
    names = {fault: backend_name(fault, Mode.AFTER_FIRST) for fault in FAULTS}
    sides = ["local", *names.values()]
    backends = "".join(f"  {name}: {{kind: mlx-lm}}\n" for name in sides)
    checks = "".join(
        f"  - stress: {{target: adder@{name}, levels: [1, 2, 4], repeats: 1}}\n    name: {name}\n"
        for name in sides
    )
    write_project(pytester, f"  adder: {{path: '{tiny_models['bf16']}'}}\n", backends, checks)
    pytester.runpytest("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    results = load_results(pytester.path / "r.json")
    live = aggregates(results)
    assert len(live) == len(sides)
    for nodeid, aggregate in live.items():
        for reverse in (False, True):
            assert_same_aggregate(resummarized(results, nodeid, reverse=reverse), aggregate)
    by_name = {a["check"].removeprefix("stress(").removesuffix(")"): a for a in live.values()}
    assert by_name["local"]["outcome"] == "passed" and by_name["local"]["violations"] == []
    for fault, words in FAULTS.items():
        aggregate = by_name[names[fault]]
        assert aggregate["outcome"] == "failed", fault
        (failed,) = [v for v in aggregate["violations"] if " items failed: " in v]
        assert failed.startswith("3 of 3 items failed: c1 ("), failed
        per_level = dict(re.findall(r"(c\d+) \((.*?)\)(?:, (?=c\d+ \()|$)", failed))
        assert sorted(per_level) == ["c1", "c2", "c4"], failed
        assert all(words in first for first in per_level.values()), per_level
