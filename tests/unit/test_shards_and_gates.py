"""Gates that can pass, and gates across shards, by hand.

- A gate on a Wilson upper bound that fails at zero events with the whole selection's size
  is a configuration error, at the limit's YAML line, with the fewest trials that could pass.
- A shard's aggregate defers its suite gates to the merge.
- The merge recomputes every kind's aggregate from the union of the shards' item records and
  judges the suite gates there; ``pytest-infercheck report`` exits 1 when one fails.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.checks.batch_invariance import (
    AloneOutput,
    BatchInvarianceAggregate,
    BatchInvariancePrompt,
    Trial,
)
from pytest_infercheck.checks.cache_pollution import CachePollutionAggregate, HostileRecord
from pytest_infercheck.checks.determinism import (
    SCORE_INTERVAL,
    DeterminismAggregate,
    DeterminismPrompt,
)
from pytest_infercheck.checks.framework.outcome import DEFERRED, Outcome, defer_gates
from pytest_infercheck.checks.parity import (
    EndpointCounts,
    EndpointParityAggregate,
    EndpointSide,
    ParityAggregate,
    ParityPrompt,
    StreamSide,
)
from pytest_infercheck.checks.stress import StressAggregate, StressLevel
from pytest_infercheck.cli import main
from pytest_infercheck.config import check_rate_gates, load_matrix
from pytest_infercheck.metrics.determinism import DistinctOutput
from pytest_infercheck.metrics.stats import wilson_interval, wilson_min_trials
from pytest_infercheck.records import plain_data
from pytest_infercheck.report.merge import failed_gates, merge_results
from pytest_infercheck.report.terminal import summary_lines
from pytest_infercheck.report.views import item_detail
from pytest_infercheck.suites import load_suite
from pytest_infercheck.yamlpos import SourceError

from .test_results import results

Z95 = 1.959963984540054  # Phi^-1(0.975)


# -- the fewest trials a Wilson gate needs ---------------------------------------------------------
def test_wilson_min_trials_by_hand() -> None:
    # At 0 events the upper bound is z^2 / (n + z^2) <= r  <=>  n >= z^2 (1 - r) / r.
    # r = 0.1: 3.8414588 * 0.9 / 0.1 = 34.573 -> 35; the bound at 34 and 35 brackets 0.1.
    z2 = Z95 * Z95
    assert z2 * 0.9 / 0.1 == pytest.approx(34.5731, abs=1e-4)
    assert wilson_min_trials(0.1) == 35
    assert (
        wilson_interval(0, 34)[1]
        == pytest.approx(z2 / (34 + z2))
        == pytest.approx(0.101515, abs=1e-6)
    )
    assert wilson_interval(0, 35)[1] == pytest.approx(0.098901, abs=1e-6)
    # The numbers: 0/30 -> 0.1135 (fails 0.1), 0/60 -> 0.0602 (passes).
    assert wilson_interval(0, 30)[1] == pytest.approx(0.113513, abs=1e-6)
    assert wilson_interval(0, 60)[1] == pytest.approx(0.060172, abs=1e-6)
    # r = 0.05: 3.8414588 * 0.95 / 0.05 = 72.99 -> 73; r = 0.35: 7.13 -> 8.
    assert wilson_min_trials(0.05) == 73 and wilson_min_trials(0.35) == 8
    # 90%: z = 1.6448536, z^2 = 2.7055435; r = 0.1: 24.35 -> 25.
    assert wilson_min_trials(0.1, 0.9) == 25
    assert wilson_min_trials(1.0) == 1 and wilson_min_trials(0.0) is None


# -- gates that cannot pass are collection errors ----------------------------------------------
SUITE_LINES = [
    f'{{"id": "p{i:02d}", "prompt": "{i}+1=", "answer": "{i + 1}", "answer_kind": "number"}}'
    for i in range(30)
] + [f'{{"id": "q{i:02d}", "prompt": "say hi {i}"}}' for i in range(5)]

MATRIX = """\
models:
  m: {path: ./m}
suites: [s.jsonl]
checks:
  - compare: {baseline: m, test: m}
    flips:
      fail_item_on: correct_to_wrong
      max_rate: 0.1
  - stress: {target: m, levels: [4, 1], repeats: 2}
    flips: {max_rate: 0.05}
"""


def gate_error(tmp_path: Path, matrix: str, index: int, limit: int | None = None) -> str | None:
    """The collection error of check ``index`` over the suite (first ``limit`` prompts)."""
    (tmp_path / "s.jsonl").write_text("\n".join(SUITE_LINES) + "\n")
    (tmp_path / "infercheck.yaml").write_text(matrix)
    loaded = load_matrix(tmp_path / "infercheck.yaml")
    suite = load_suite("s.jsonl", tmp_path).limited(limit)
    try:
        check_rate_gates(loaded, loaded.matrix.checks[index], index, suite)
    except SourceError as exc:
        return str(exc).removeprefix(f"{tmp_path / 'infercheck.yaml'}:")
    return None


def test_a_flip_gate_that_cannot_pass_at_the_suites_size_is_an_error_at_its_line(
    tmp_path: Path,
) -> None:
    # 30 answered prompts (the 5 without an answer kind do not count): 0/30 -> 0.1135 > 0.1.
    assert gate_error(tmp_path, MATRIX, 0) == (
        "8: checks[0].flips.max_rate 0.1 cannot pass with 30 answered prompts (suite s): the "
        "95% Wilson upper bound at 0 flips is 0.1135; it needs at least 35 answered prompts"
    )
    # A limit lowers n: 10 answered prompts.
    assert "with 10 answered prompts" in str(gate_error(tmp_path, MATRIX, 0, limit=10))
    # 0.12 needs 29 (0.1170 <= 0.12); the point estimate can always pass; so can a suite
    # without answers (nothing to gate).
    assert gate_error(tmp_path, MATRIX.replace("0.1\n", "0.12\n"), 0) is None
    point = MATRIX.replace("max_rate: 0.1\n", "max_rate: 0.1\n      gate: point\n")
    assert gate_error(tmp_path, point, 0) is None
    assert gate_error(tmp_path, MATRIX, 0, limit=0) is None
    zero = gate_error(tmp_path, MATRIX.replace("max_rate: 0.1", "max_rate: 0"), 0)
    assert str(zero).endswith("no number of trials is enough (use gate: point)")


def test_a_stress_flip_gate_is_counted_over_the_smallest_levels_requests(tmp_path: Path) -> None:
    # Level 1 sends 35 prompts x 2 repeats = 70 requests: 0/70 -> 0.0520 > 0.05 (needs 73).
    assert gate_error(tmp_path, MATRIX, 1) == (
        "10: checks[1].flips.max_rate 0.05 cannot pass with 70 requests at c1 (35 prompts x 2) "
        "(suite s): the 95% Wilson upper bound at 0 flips is 0.0520; it needs at least 73 "
        "requests per level (prompts x repeats)"
    )
    assert gate_error(tmp_path, MATRIX.replace("repeats: 2", "repeats: 3"), 1) is None


# -- shards defer -------------------------------------------------------------------------------
def test_a_shards_aggregate_defers_its_gates() -> None:
    outcome = Outcome(["flip rate 0/30: ..."], "30 prompts", {"n": 1}, [("infercheck_n", 1)])
    deferred = defer_gates(outcome, "1/2")
    assert deferred.violations == [] and deferred.data == {"n": 1}
    assert deferred.text == f"30 prompts\n{DEFERRED.format(shard='1/2')}"
    assert deferred.text.endswith("suite gates deferred to `pytest-infercheck report` (shard 1/2)")
    assert deferred.properties[-1] == ("infercheck_gates_deferred", "1/2")
    assert deferred.gates_deferred_to == "1/2"
    # Said in the HTML detail and under the terminal summary.
    record = entry("determinism", "aggregate", "aggregate", determinism_aggregate(2), shard="1/2")
    assert DEFERRED.format(shard="1/2") in item_detail(record, "passed")
    lines = summary_lines([(record["nodeid"], True, record)])
    assert lines[-1].startswith("suite gates deferred to `pytest-infercheck report` (shard 1/2)")


# -- merging every kind -------------------------------------------------------------------------
ENGINES = {"q4@local": {"backend": "mlx-lm"}}


def entry(
    kind: str,
    name: str,
    role: str,
    data: Any,
    *,
    thresholds: dict[str, Any] | None = None,
    violations: list[str] | None = None,
    outcome: str | None = None,
    shard: str | None = None,
) -> dict[str, Any]:
    """An item of a results file of check ``kind(q4)`` over suite ``addition``."""
    violations = violations or []
    return {
        "nodeid": f"infercheck.yaml::{kind}(q4)::addition::{name}",
        "outcome": outcome or ("failed" if violations else "passed"),
        "duration_s": 1.0,
        "worker": None,
        "longrepr": "\n".join(violations) or None,
        "check": f"{kind}(q4)",
        "kind": kind,
        "suite": "addition",
        "role": role,
        "name": name,
        "thresholds": thresholds or {},
        "violations": violations,
        "data": data if isinstance(data, dict) else plain_data(data),
        **({"gates_deferred_to": shard} if shard else {}),
    }


def merged(
    shard_items: list[list[dict[str, Any]]],
    aggregates: list[Any],
    kind: str,
    warnings: int = 0,
    **kw: Any,
) -> dict[str, Any]:
    """The merged aggregate of two shards (their items, each one's deferred aggregate)."""
    files = []
    for index, (items, data) in enumerate(zip(shard_items, aggregates, strict=True), 1):
        aggregate = entry(kind, "aggregate", "aggregate", data, shard=f"{index}/2", **kw)
        files.append((f"s{index}.json", results([*items, aggregate], {"index": index, "count": 2})))
    runs, notes = merge_results(files)
    assert len(notes) == warnings, notes
    (run,) = runs
    (aggregate,) = [i for i in run["items"] if i["role"] == "aggregate"]
    assert "gates_deferred_to" not in aggregate  # the merge judged the gates
    return aggregate


def determinism_prompt(pid: str, counts: list[int], errors: int = 0) -> DeterminismPrompt:
    runs = sum(counts) + errors
    outputs = [DistinctOutput(str(k), [k], count) for k, count in enumerate(counts)]
    return DeterminismPrompt(
        prompt_id=pid,
        target="q4@local",
        runs=runs,
        modal_share=counts[0] / runs,
        distinct=len(counts),
        errors=errors,
        error_messages=[f"run {runs - 1}: HTTP 503"] * errors,
        first_divergences=[None] * runs,
        max_logprob_drift=1e-7 if pid == "a" else None,
        outputs=outputs,
    )


def determinism_aggregate(prompts: int) -> DeterminismAggregate:
    """What a shard recorded (its own numbers: the merge keeps only target, runs, engines)."""
    return DeterminismAggregate(
        "q4@local", 4, prompts, prompts, 1.0, 0.5, 1.0, SCORE_INTERVAL, 0, None, ENGINES
    )


def test_determinism_is_recomputed_from_the_prompts_of_both_shards_and_gated_there() -> None:
    # Shard 1: a, b deterministic over 4 runs; shard 2: c with 2/4 modal, d with an error.
    thresholds = {"min_determinism": 0.9, "max_error_rate": 0.0}
    prompts = {
        "a": determinism_prompt("a", [4]),
        "b": determinism_prompt("b", [4]),
        "c": determinism_prompt("c", [2, 1, 1]),
        "d": determinism_prompt("d", [3], errors=1),
    }
    shards = [
        [entry("determinism", n, "prompt", prompts[n], thresholds=thresholds) for n in "ab"],
        [entry("determinism", n, "prompt", prompts[n], thresholds=thresholds) for n in "cd"],
    ]
    aggregate = merged(
        shards,
        [determinism_aggregate(2), determinism_aggregate(2)],
        "determinism",
        thresholds=thresholds,
    )
    data = aggregate["data"]
    # score = mean modal share = (1 + 1 + 0.5 + 0.75) / 4 = 0.8125; pooled 13/16 for the CI.
    low, high = wilson_interval(13, 16)
    assert data == {
        "target": "q4@local",
        "runs": 4,
        "prompts": 4,
        "deterministic_prompts": 2,
        "score": 0.8125,
        "score_low": low,
        "score_high": high,
        "interval": SCORE_INTERVAL,
        "errors": 1,
        "max_logprob_drift": 1e-7,
        "engines": ENGINES,
        # c's outputs carry no labelled divergence (a record without ties): none counted.
        "divergence_labels": {"near-tie": 0, "decisive": 0, "unknown": 0},
    }
    assert aggregate["outcome"] == "failed"
    assert aggregate["violations"] == [
        f"determinism score (95% Wilson interval {low:.4f}-{high:.4f}) 0.8125 < "
        "min_determinism 0.9",
        "error rate over all runs (1/16 runs failed) 0.0625 > max_error_rate 0",
    ]


def bi_prompt(pid: str, match: bool) -> BatchInvariancePrompt:
    trial = Trial(0, 1, ["x", pid], match, None if match else 0, None, "46" if match else "4")
    return BatchInvariancePrompt(pid, "q4@local", 0, AloneOutput("46", [1]), [trial], "burst")


def test_batch_invariance_counts_the_prompts_of_both_shards() -> None:
    shard_1 = [entry("batch-invariance", "a", "prompt", plain_data(bi_prompt("a", True)))]
    shard_2 = [
        entry("batch-invariance", "b", "prompt", plain_data(bi_prompt("b", True))),
        entry(
            "batch-invariance", "c", "prompt", plain_data(bi_prompt("c", False)), violations=["x"]
        ),
    ]
    partial = BatchInvarianceAggregate("q4@local", 1, 1, 1.0, 1, "burst", ENGINES)
    aggregate = merged([shard_1, shard_2], [partial, partial], "batch-invariance")
    assert aggregate["outcome"] == "failed"  # no suite gate, but prompt c failed its item
    assert aggregate["violations"] == ["1 of 3 items failed: c (x)"]
    # c's trial carries no labelled divergence (a record without ties): none counted.
    labels = {"near-tie": 0, "decisive": 0, "unknown": 0}
    assert aggregate["data"] == plain_data(
        BatchInvarianceAggregate("q4@local", 3, 2, 2 / 3, 3, "burst", ENGINES, labels)
    )


def stream_prompt(pid: str, match: bool) -> ParityPrompt:
    ref = StreamSide("46", [1, 2], "stop", "non-streamed")
    other = StreamSide("46" if match else "4", [1, 2] if match else [1], "stop", "streamed")
    div = None if match else 1
    unit = None if match else "token"
    flip = "unchanged" if match else "correct_to_wrong"
    return ParityPrompt(
        pid, "q4@local", ref, other, match, div, unit, 1.0, ["46", "46"], flip, None
    )


NONE = {"near-tie": 0, "decisive": 0, "unknown": 0}
"""Divergence labels counted over records without ties: none."""


def test_stream_parity_counts_items_and_errors_of_both_shards() -> None:
    shard_1 = [
        entry("stream-parity", "a", "prompt", stream_prompt("a", True)),
        entry("stream-parity", "b", "prompt", stream_prompt("b", False), violations=["differs"]),
    ]
    errored = {**entry("stream-parity", "c", "prompt", {}), "outcome": "error"}
    errored["longrepr"] = "backend error: HTTP 500"
    shard_2 = [entry("stream-parity", "d", "prompt", stream_prompt("d", True)), errored]
    partial_1 = ParityAggregate("q4@local", 2, 1, 1, 1, 1, 0, {}, ["b"], ENGINES)
    partial_2 = ParityAggregate("q4@local", 2, 1, 0, 1, 0, 1, {"c": "HTTP 500"}, ["c"], ENGINES)
    aggregate = merged([shard_1, shard_2], [partial_1, partial_2], "stream-parity")
    record = ParityAggregate(
        "q4@local", 4, 2, 1, 2, 1, 1, {"c": "HTTP 500"}, ["b", "c"], ENGINES, divergence_labels=NONE
    )
    assert aggregate["data"] == plain_data(record)
    assert aggregate["outcome"] == "failed"
    assert aggregate["violations"] == [
        "1 of 4 items errored: c (HTTP 500)",
        "1 of 4 items failed: b (differs)",
    ]


def test_endpoint_parity_counts_each_endpoint_over_both_shards() -> None:
    def prompt(pid: str, endpoint: str, match: bool) -> dict[str, Any]:
        ref = EndpointSide("46", None, "stop", "completions", "t")
        other = EndpointSide("46" if match else "4", None, "stop", endpoint)  # type: ignore[arg-type]
        record = ParityPrompt(
            pid,
            "q4@local",
            ref,
            other,
            match,
            None,
            None,
            1.0 if match else 0.5,
            [None, None],
            None,
            None,
        )
        return entry(
            "endpoint-parity",
            f"{pid}[{endpoint}]",
            "prompt",
            record,
            violations=[] if match else ["x"],
        )

    shard_1 = [prompt("a", "chat", True), prompt("a", "messages", False)]
    shard_2 = [prompt("b", "chat", True), prompt("b", "messages", True)]
    counts = {"chat": EndpointCounts(1, 1, 0), "messages": EndpointCounts(1, 1, 0)}
    partial = EndpointParityAggregate(
        "q4@local", 2, 2, 0, 0, 0, 0, {}, [], ENGINES, reference="completions", endpoints=counts
    )
    aggregate = merged([shard_1, shard_2], [partial, partial], "endpoint-parity")
    data = aggregate["data"]
    assert (data["items"], data["n_match"], data["n_failed"], data["failed"]) == (
        4,
        3,
        1,
        ["a[messages]"],
    )
    assert data["reference"] == "completions"
    assert data["endpoints"] == {
        "chat": {"items": 2, "match": 2, "failed": 0},
        "messages": {"items": 2, "match": 1, "failed": 1},
    }
    assert aggregate["violations"] == ["1 of 4 items failed: a[messages] (x)"]


def test_cache_pollution_unites_the_hostile_items_of_both_shards() -> None:
    def hostile(kind: str, alive: bool) -> dict[str, Any]:
        record = HostileRecord("q4@local", kind, "HTTP 400", alive, [], 3)  # type: ignore[arg-type]
        violations = [] if alive else [f"the server is not alive after the {kind} request"]
        return entry("cache-pollution", kind, "hostile", record, violations=violations)

    shard_1 = [hostile("disconnect", True), hostile("invalid-utf8", False)]
    shard_2 = [hostile("context-overflow", True)]
    partial = CachePollutionAggregate("q4@local", 1, 0, 0, 0, 3, {}, ENGINES)
    aggregate = merged([shard_1, shard_2], [partial, partial], "cache-pollution")
    responses = dict.fromkeys(["context-overflow", "invalid-utf8", "disconnect"], "HTTP 400")
    assert aggregate["data"] == plain_data(
        CachePollutionAggregate("q4@local", 3, 1, 0, 1, 3, responses, ENGINES)
    )
    assert aggregate["violations"] == [
        "1 of 3 items failed: invalid-utf8 (the server is not alive after the invalid-utf8 "
        "request)",
        "the server died after: invalid-utf8",
    ]


def level(n: int, violations: list[str], consistent: int = 8) -> StressLevel:
    return StressLevel(
        "q4@local",
        n,
        8,
        {},
        0.0,
        consistent,
        consistent / 8,
        0,
        0.0,
        0.1,
        0.2,
        None,
        float(n),
        n,
        [],
        violations,
        "main",
    )


def test_stress_is_the_union_of_the_levels_measured_in_each_shard() -> None:
    levels = {
        1: level(1, []),
        4: level(
            4,
            ["consistency 0.500 (4/8 outputs equal to their reference) < min_consistency 1.0"],
            consistent=4,
        ),
        16: level(16, []),
    }
    shard_1 = [entry("stress", "c4", "level", levels[4], violations=levels[4].violations)]
    shard_2 = [entry("stress", f"c{n}", "level", levels[n]) for n in (16, 1)]
    aggregate = merged(
        [shard_1, shard_2],
        [
            StressAggregate("q4@local", [levels[4]], ENGINES),
            StressAggregate("q4@local", [levels[1]], ENGINES),
        ],
        "stress",
    )
    assert aggregate["data"] == plain_data(
        StressAggregate("q4@local", [levels[1], levels[4], levels[16]], ENGINES, NONE)
    )
    assert aggregate["violations"] == [
        "1 of 3 items failed: c4 (consistency 0.500 (4/8 outputs equal to their reference) < "
        "min_consistency 1.0)",
    ]  # each level's item verdict, named once by the framework


def test_deferred_gates_that_cannot_be_recomputed_are_an_error_not_a_pass() -> None:
    # A shard's aggregate of a file of another version: its record cannot be read.
    shards = [[], []]
    aggregate = merged(shards, [{"score": 1.0}, {"score": 1.0}], "determinism", warnings=1)
    assert aggregate["outcome"] == "error"
    assert "the gates are not judged" in aggregate["longrepr"]


# -- the merge job is the gate ------------------------------------------------------------------
def shard_files(tmp_path: Path, thresholds: dict[str, Any]) -> list[str]:
    prompts = [determinism_prompt(n, [4] if n != "c" else [2, 2]) for n in "abc"]
    paths = []
    for index, names in ((1, "ab"), (2, "c")):
        items = [
            entry("determinism", p.prompt_id, "prompt", p, thresholds=thresholds)
            for p in prompts
            if p.prompt_id in names
        ]
        items.append(
            entry(
                "determinism",
                "aggregate",
                "aggregate",
                determinism_aggregate(len(names)),
                thresholds=thresholds,
                shard=f"{index}/2",
            )
        )
        path = tmp_path / f"results-{index}.json"
        data = results(items, {"index": index, "count": 2})
        data["run"]["exitstatus"] = 0
        path.write_text(json.dumps(data))
        paths.append(str(path))
    return paths


def test_report_exits_1_naming_a_merged_gate_that_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each shard alone: a, b (score 1.0) and c (0.5); the union: 2.5 / 3 = 0.8333 < 0.9.
    paths = shard_files(tmp_path, {"min_determinism": 0.9})
    out = tmp_path / "r.html"
    assert main(["report", *paths, "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert captured.out == f"wrote {out}\n" and out.exists()
    low, high = wilson_interval(10, 12)  # 4 + 4 + 2 modal runs of 12
    assert captured.err.splitlines() == [
        "pytest-infercheck: failed: infercheck.yaml::determinism(q4)::addition::aggregate: "
        f"determinism score (95% Wilson interval {low:.4f}-{high:.4f}) 0.833333 < "
        "min_determinism 0.9",
        "pytest-infercheck: 1 failure(s) in the merged run",
    ]
    runs, _ = merge_results([(p, json.loads(Path(p).read_text())) for p in paths])
    assert runs[0]["run"]["exitstatus"] == 1 and runs[0]["run"]["merged_shards"] == [1, 2]
    assert failed_gates(runs) == [captured.err.splitlines()[0].split("failed: ", 1)[1]]


def test_report_exits_0_when_every_merged_gate_passes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = shard_files(tmp_path, {"min_determinism": 0.8})
    assert main(["report", *paths, "-o", str(tmp_path / "r.html")]) == 0
    assert capsys.readouterr().err == ""


def test_unsharded_files_are_not_judged_again() -> None:
    failed = entry("determinism", "aggregate", "aggregate", {}, violations=["score"])
    runs, _ = merge_results([("whole.json", results([failed]))])
    assert failed_gates(runs) == []
    assert math.isclose(wilson_interval(0, 60)[1], Z95**2 / (60 + Z95**2))
