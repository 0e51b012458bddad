"""The JSON results file (schema, atomic write, loader), shard merging, sharding, run ids and
scalar JUnit properties, by hand."""

from __future__ import annotations

import json
import math
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_infercheck.checks.comparison.aggregate import ComparisonAggregateRecord, aggregate
from pytest_infercheck.checks.comparison.judge import item_verdict
from pytest_infercheck.checks.comparison.prompt import PromptComparison
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.collector import make_run_id, redact, stable_argv
from pytest_infercheck.report.item_report import scalar_properties
from pytest_infercheck.report.merge import MergeError, merge_results
from pytest_infercheck.report.results import (
    SCHEMA,
    VERSION,
    ResultsError,
    load_results,
    plain,
    validate,
    write_atomic,
    write_results,
)
from pytest_infercheck.sharding import Shard, parse_shard, shard_of
from pytest_infercheck.specs import Thresholds

from .factories import prompt_comparison

UNTRUSTED = '</script><script>alert("x")</script>\u2028\x00\x1b[31m&amp; é'
THRESHOLDS = {"max_kl_position": 0.5, "flips": {"fail_item_on": "correct_to_wrong"}}
SUITE = "infercheck.yaml::compare(bf16-vs-q4)::addition"


def comparison(pid: str, kl: list[float], flip: str, text: str = "4") -> dict[str, Any]:
    return plain_data(prompt_comparison(pid, kl, flip=flip, prompt_text=text))


def item(name: str, role: str, data: dict[str, Any], outcome: str = "passed") -> dict[str, Any]:
    return {
        "nodeid": f"{SUITE}::{name}",
        "outcome": outcome,
        "duration_s": 0.5,
        "worker": None,
        "longrepr": None,
        "check": "compare(bf16-vs-q4)",
        "kind": "compare",
        "suite": "addition",
        "role": role,
        "name": name,
        "thresholds": THRESHOLDS,
        "violations": [],
        "data": data,
    }


def results(items: list[dict[str, Any]], shard: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "version": VERSION,
        "run": {
            "run_id": "ci-1",
            "started": "2026-01-01T00:00:00+00:00",
            "finished": "2026-01-01T00:01:00+00:00",
            "duration_s": 60.0,
            "argv": ["-q"],
            "shard": shard,
            "plugin_version": "0.1.0",
            "python": "3.11.7",
            "platform": "Linux",
            "hostname": "ci",
            "exitstatus": 1,
        },
        "matrices": {"infercheck.yaml": {"models": {"bf16": {"path": "m"}}}},
        "engines": {"bf16@local": {"kind": "mlx-lm"}},
        "items": items,
    }


def shard_aggregate(*names: str) -> dict[str, Any]:
    """The aggregate a shard recorded over its own prompts ``names`` (of :data:`PROMPTS`)."""
    level = aggregate([PROMPTS[n] for n in names], Thresholds.model_validate(THRESHOLDS))
    record = ComparisonAggregateRecord(
        "compare", "addition", [level], {"q4@local": {}}, tests=["q4@local"]
    )
    return item("aggregate", "aggregate", plain_data(record))


# Prompts a and b ran in shard 1, c in shard 2 (the numbers of tests/unit/test_aggregate.py).
PROMPTS = {
    "a": prompt_comparison("a", [0.1, 0.3], flip="correct_to_wrong"),
    "b": prompt_comparison("b", [0.2], flip="unchanged"),
    "c": prompt_comparison("c", [0.0, 0.0, 0.6], flip="wrong_to_correct"),
}
SHARD_1 = results(
    [
        item("a", "prompt", plain_data(PROMPTS["a"])),
        item("b", "prompt", plain_data(PROMPTS["b"])),
        shard_aggregate("a", "b"),
    ],
    {"index": 1, "count": 2},
)
SHARD_2 = results(
    [item("c", "prompt", plain_data(PROMPTS["c"])), shard_aggregate("c")],
    {"index": 2, "count": 2},
)


# -- plain JSON and the atomic write ------------------------------------------------------------
def test_plain_turns_numpy_tuples_and_non_finite_floats_into_json_types() -> None:
    value = {1: (np.float32(0.5), np.arange(2)), "x": math.nan, "y": math.inf, "z": {2}}
    assert plain(value) == {"1": [0.5, [0, 1]], "x": None, "y": None, "z": [2]}


def test_write_and_load_keep_untrusted_text_verbatim(tmp_path: Path) -> None:
    data = results([item("a", "prompt", comparison("a", [0.1], "unchanged", text=UNTRUSTED))])
    path = tmp_path / "r.json"
    write_results(path, data)
    assert load_results(path)["items"][0]["data"]["prompt_text"] == UNTRUSTED
    assert json.loads(path.read_text())["items"][0]["data"]["prompt_text"] == UNTRUSTED
    assert "<script>" in path.read_text()  # JSON, not HTML: escaping is the HTML report's job


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        write_atomic(path, "new" * 1000)
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# -- loading -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", r"bad\.json: not valid JSON \(line 1, column 2"),
        ("[1, 2]", r"bad\.json: not a pytest-infercheck results file"),
        (
            json.dumps({**results([]), "version": 3}),
            r"bad\.json: results format version 3; this pytest-infercheck reads versions 1 and 2",
        ),
        (
            json.dumps(results([{**item("a", "prompt", {}), "outcome": "exploded"}])),
            r"bad\.json: invalid results: items\.0\.outcome: Input should be 'passed'",
        ),
        (
            json.dumps({k: v for k, v in results([]).items() if k != "run"}),
            r"bad\.json: invalid results: run: Field required",
        ),
    ],
)
def test_a_bad_file_is_an_error_naming_it(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "bad.json").write_text(content)
    with pytest.raises(ResultsError, match=message):
        load_results(tmp_path / "bad.json")


def test_a_missing_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ResultsError, match=r"gone\.json: no such file"):
        load_results(tmp_path / "gone.json")


def test_unknown_keys_are_kept_for_newer_writers() -> None:
    data = results([])
    data["run"]["ci_url"] = "https://ci/1"
    assert validate(data)["run"]["ci_url"] == "https://ci/1"


# -- merging shards ------------------------------------------------------------------------------
def judged(doc: dict[str, Any]) -> dict[str, Any]:
    """A copy of results ``doc`` whose prompt items carry the verdicts their run gave them
    (each record judged by :func:`~pytest_infercheck.checks.comparison.judge.item_verdict`
    under its thresholds), failed where they have any."""
    out = json.loads(json.dumps(doc))
    for entry in out["items"]:
        if entry["role"] != "prompt":
            continue
        record = load_record(PromptComparison, entry["data"])
        entry["violations"] = item_verdict(record, Thresholds.model_validate(entry["thresholds"]))
        entry["outcome"] = "failed" if entry["violations"] else "passed"
    return out


def test_shards_merge_into_one_run_with_the_aggregate_recomputed_from_all_prompts() -> None:
    runs, warnings = merge_results([("s1.json", judged(SHARD_1)), ("s2.json", judged(SHARD_2))])
    assert warnings == [] and len(runs) == 1
    run = runs[0]
    assert [i["name"] for i in run["items"]] == ["a", "b", "c", "aggregate"]
    assert run["run"]["shard"] is None
    (level,) = run["items"][-1]["data"]["levels"]
    # Pooled KL over the three prompts: [0.1, 0.3, 0.2, 0, 0, 0.6] -> 1.2 / 6 = 0.2, max 0.6.
    assert level["n_prompts"] == 3 and level["kl_n"] == 6
    assert level["kl_mean"] == pytest.approx(0.2) and level["kl_max"] == pytest.approx(0.6)
    # a: correct->wrong (fails: fail_item_on), c: wrong->correct and KL_t 0.6 > 0.5 (fails).
    assert level["n_flips"] == 2 and level["n_answered"] == 3 and level["n_failed"] == 2
    aggregate = run["items"][-1]
    # the aggregate fails for its failed items, named with their first violation
    assert aggregate["outcome"] == "failed" and aggregate["duration_s"] == 1.0
    assert aggregate["violations"] == [
        "2 of 3 items failed: a (answer flip correct_to_wrong (fail_item_on: correct_to_wrong)), "
        "c (max KL_t 0.6 > max_kl_position 0.5)"
    ]
    assert set(aggregate["data"]["engines"]) == {"q4@local"}


def test_aggregate_gates_are_judged_again_on_the_merged_numbers() -> None:
    gated = {**THRESHOLDS, "max_mean_kl": 0.15}
    shards = []
    for shard in (SHARD_1, SHARD_2):
        copy = json.loads(json.dumps(shard))
        for entry in copy["items"]:
            entry["thresholds"] = gated
        shards.append(judged(copy))
    runs, _ = merge_results([("s1.json", shards[0]), ("s2.json", shards[1])])
    aggregate = runs[0]["items"][-1]
    assert aggregate["outcome"] == "failed"
    failed, violation = aggregate["violations"]
    assert failed.startswith("2 of 3 items failed: a ")
    assert violation == "q4@local: mean KL 0.2 > max_mean_kl 0.15"


def test_a_missing_shard_is_a_warning() -> None:
    runs, warnings = merge_results([("s1.json", SHARD_1)])
    assert [i["name"] for i in runs[0]["items"]] == ["a", "b", "aggregate"]
    assert warnings == ["run ci-1: shard(s) 2/2 missing; its numbers cover the others"]


def test_overlapping_shards_are_an_error_naming_both_files() -> None:
    other = json.loads(json.dumps(SHARD_2))
    other["items"].insert(0, SHARD_1["items"][0])
    with pytest.raises(MergeError, match=r"::a is in both s1\.json and s2\.json"):
        merge_results([("s1.json", SHARD_1), ("s2.json", other)])


def test_the_same_shard_twice_is_an_error() -> None:
    with pytest.raises(MergeError, match=r"s1\.json and again\.json are both shard 1/2"):
        merge_results([("s1.json", SHARD_1), ("again.json", SHARD_1)])


def test_shards_with_different_matrices_are_an_error() -> None:
    other = json.loads(json.dumps(SHARD_2))
    other["matrices"]["infercheck.yaml"]["models"]["bf16"]["path"] = "elsewhere"
    with pytest.raises(MergeError, match=r"different contents for the matrix infercheck\.yaml"):
        merge_results([("s1.json", SHARD_1), ("s2.json", other)])


def test_unsharded_files_are_runs_of_their_own_even_with_one_run_id() -> None:
    one = results([item("a", "prompt", comparison("a", [0.1], "unchanged"))])
    runs, warnings = merge_results([("before.json", one), ("after.json", one)])
    assert runs == [one, one] and warnings == []


def test_single_target_aggregates_are_kept_per_shard_with_a_warning() -> None:
    def determinism(index: int, score: float, outcome: str) -> dict[str, Any]:
        entry = {**item("aggregate", "aggregate", {"score": score}, outcome), "kind": "determinism"}
        entry["violations"] = [f"score {score}"] if outcome == "failed" else []
        return results([entry], {"index": index, "count": 2})

    runs, warnings = merge_results(
        [("s1.json", determinism(1, 1.0, "passed")), ("s2.json", determinism(2, 0.5, "failed"))]
    )
    (merged,) = runs[0]["items"]
    assert merged["outcome"] == "failed" and merged["violations"] == ["shard 2/2: score 0.5"]
    assert merged["data"]["shards"] == [
        {"shard": "1/2", "score": 1.0},
        {"shard": "2/2", "score": 0.5},
    ]
    assert warnings == [
        f"run ci-1: {SUITE}::aggregate (determinism) is not recomputed across shards; each "
        "shard's aggregate is kept under data.shards"
    ]


# -- sharding ----------------------------------------------------------------------------------
def test_parse_shard() -> None:
    assert parse_shard("2/3") == Shard(2, 3)
    assert parse_shard(" 1 / 1 ") == Shard(1, 1)
    for bad in ("0/3", "4/3", "1/0", "3", "a/b", "-1/2"):
        with pytest.raises(pytest.UsageError, match="infercheck-shard"):
            parse_shard(bad)


def test_shard_of_is_a_stable_hash_of_the_node_id_without_parameters() -> None:
    # Fixed values (1 + first 8 bytes of sha256 mod 3), the same in every process and on every
    # machine, unlike Python's salted hash().
    assert [shard_of(f"infercheck.yaml::c::s::p{i}", 3) for i in range(3)] == [2, 1, 3]
    assert shard_of("a::s01[q4]", 5) == shard_of("a::s01[q8]", 5) == shard_of("a::s01", 5)
    counts = np.bincount([shard_of(f"f::c::s::p{i}", 3) for i in range(600)], minlength=4)
    assert counts[0] == 0 and all(150 < n < 250 for n in counts[1:])


# -- run ids -----------------------------------------------------------------------------------
STARTED = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_stable_argv_drops_the_options_that_differ_between_shards() -> None:
    argv = ["-q", "--infercheck-shard", "1/3", "--infercheck-results=r1.json", "--junitxml", "j"]
    assert stable_argv([*argv, "-k", "q4"]) == ["-q", "-k", "q4"]


def test_run_id_rules() -> None:
    root, argv = Path("/repo"), ["-q", "--infercheck-shard", "1/2"]
    shard_1 = make_run_id(None, root, argv, True, STARTED, {})
    assert shard_1 == make_run_id(None, root, ["-q", "--infercheck-shard=2/2"], True, STARTED, {})
    assert len(shard_1) == 12 and shard_1 != make_run_id(None, root, ["-x"], True, STARTED, {})
    assert make_run_id(None, root, ["-q"], False, STARTED, {}) == f"{shard_1}-20260102T030405"
    ci = {"GITHUB_RUN_ID": "77", "GITHUB_RUN_ATTEMPT": "2"}
    assert make_run_id(None, root, argv, True, STARTED, ci) == f"77.2-{shard_1}"
    assert make_run_id(None, root, argv, True, STARTED, {"CI_PIPELINE_ID": "9"}) == f"9-{shard_1}"
    assert make_run_id(None, root, argv, True, STARTED, {"INFERCHECK_RUN_ID": "e"}) == "e"
    assert make_run_id("given", root, argv, True, STARTED, {"INFERCHECK_RUN_ID": "e"}) == "given"


def test_secrets_are_redacted_from_stored_matrices() -> None:
    matrix = {
        "backends": {
            "llama": {"kind": "openai", "env": {"HF_TOKEN": "hf_secret"}},
            "remote": {"url": "https://user:pa55@example.com:8000/v1"},
        },
        "models": {"m": "openai:x"},
    }
    assert redact(matrix) == {
        "backends": {
            "llama": {"kind": "openai", "env": {"HF_TOKEN": "<redacted>"}},
            "remote": {"url": "https://<redacted>@example.com:8000/v1"},
        },
        "models": {"m": "openai:x"},
    }


# -- JUnit properties ----------------------------------------------------------------------------
def test_scalar_properties_spread_lists_and_mappings() -> None:
    assert scalar_properties(
        [("a", 1), ("b", [1, 2]), ("c", {"x": None, "y": [True]}), ("d", "text")]
    ) == [("a", 1), ("b_0", 1), ("b_1", 2), ("c_x", None), ("c_y_0", True), ("d", "text")]


def test_version_1_files_are_read(tmp_path: Path) -> None:
    # Version 1 wrote the same envelope; its comparison records lack ``sameness``.
    old = results([item("a", "prompt", {"kl_mean": 0.5, "flip": "unchanged"})])
    old["version"] = 1
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    loaded = load_results(path)
    assert loaded["version"] == 1 and loaded["items"][0]["data"]["kl_mean"] == 0.5
    assert VERSION == 2


def test_a_long_failure_keeps_its_first_line_and_its_end() -> None:
    """A crashed server's failure is its first line (which server, that it died) then pages of
    log lines: the results file keeps that first line and the end, not the end only (before,
    ``backend error: server 'invariant' died`` was cut and only log lines were left)."""
    from pytest_infercheck.report.collector import clip_longrepr

    first = "backend error: server 'invariant' died (exit code 0); last log lines of x.log:"
    text = first + "\n" + "".join(f"log line {i}\n" for i in range(1000)) + "the end"
    clipped = clip_longrepr(text, limit=200)
    assert len(clipped) == 200
    assert clipped.startswith(first + "\n…\n")
    assert clipped.endswith("log line 999\nthe end")
    assert clip_longrepr("short", limit=200) == "short"
    one_line = clip_longrepr("a" * 150 + "b" * 150, limit=200)
    assert one_line == "a" * 100 + "\n…\n" + "b" * 97
