"""Real runs on the tiny models: the JSON results file (against the JUnit properties, with
errors, skips and untrusted text), xdist, and sharding (a partition of the run whose merged
report has the unsharded numbers)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from _pytest.junitxml import mangle_test_address

from pytest_infercheck.checks.registry import KIND_NAMES
from pytest_infercheck.cli import main as cli_main
from pytest_infercheck.report.merge import merge_results
from pytest_infercheck.report.results import load_results

UNTRUSTED_PROMPT = '</script><b onmouseover="x">\u2028&amp;12+34='
COMPARE_AND_SWEEP = """\
  - compare: {baseline: bf16, test: q4}
    max_kl: 1.0e-9
  - sweep: {baseline: bf16, models: [q8, q4]}
    max_kl: 1.0e-4
"""
DETERMINISM = "  - determinism: {target: q4, runs: 2}\n"
SKIP_AND_BREAK = """
import pytest

def pytest_runtest_setup(item):
    if item.name == "s02":
        pytest.skip("skipped on purpose")
    if item.name == "s03":
        raise RuntimeError("setup broke on purpose")
"""


def items_by_id(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["nodeid"]: i for i in results["items"]}


def test_results_file_holds_what_junit_says_plus_errors_skips_and_verbatim_text(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(COMPARE_AND_SWEEP + DETERMINISM)
    suite = pytester.path / "addition.jsonl"
    extra = {"id": "x01", "prompt": UNTRUSTED_PROMPT, "answer": "46", "answer_kind": "number"}
    suite.write_text(suite.read_text() + "\n" + json.dumps({**extra, "max_tokens": 5}) + "\n")
    pytester.makeconftest(SKIP_AND_BREAK)
    result = pytester.runpytest("-q", "--junitxml=out.xml", "--infercheck-results=out/r.json")
    result.stdout.fnmatch_lines(["infercheck results: out/r.json"])
    results = load_results(pytester.path / "out" / "r.json")
    items = items_by_id(results)
    outcomes = result.parseoutcomes()
    assert len(items) == sum(outcomes.values()) == (9 + 1) + (2 * 9 + 2) + (9 + 1)
    junit = _junit_by_nodeid(pytester.path / "out.xml", items)

    compare = "infercheck.yaml::compare(bf16-vs-q4)::addition::"
    # Skips and setup errors are recorded with the item's identity and a short reason.
    skipped, broken = items[compare + "s02"], items[compare + "s03"]
    assert skipped["outcome"] == "skipped" and skipped["longrepr"] == "Skipped: skipped on purpose"
    assert broken["outcome"] == "error" and "setup broke on purpose" in broken["longrepr"]
    assert skipped["kind"] == broken["kind"] == "compare" and broken["data"] == {}
    assert broken["thresholds"]["max_kl"] == 1e-9
    # Untrusted model input is stored verbatim (JSON escapes it; the HTML report must too).
    assert items[compare + "x01"]["data"]["prompt_text"] == UNTRUSTED_PROMPT

    # The numbers equal the JUnit properties, item by item.
    prompts = [i for i in items.values() if i["role"] == "prompt" and i["kind"] != "determinism"]
    checked = 0
    for item in prompts:
        if item["outcome"] in ("skipped", "error"):
            continue
        props, data = junit[item["nodeid"]], item["data"]
        assert float(props["infercheck_kl_mean"]) == data["kl_mean"]
        assert float(props["infercheck_kl_max"]) == data["kl_max"]
        assert props["infercheck_first_divergence"] == str(data["first_divergence"])
        assert float(props["infercheck_similarity"]) == round(data["similarity"], 6)
        assert props["infercheck_flip"] == data["flip"]
        assert item["outcome"] == ("failed" if item["violations"] else "passed")
        checked += 1
    assert checked == 2 * 9 + 7
    compare_agg = items[compare + "aggregate"]
    (level,) = compare_agg["data"]["levels"]
    props = junit[compare + "aggregate"]
    assert float(props["infercheck_kl_mean"]) == level["kl_mean"]
    assert int(props["infercheck_n_failed"]) == level["n_failed"] >= 6
    sweep = items["infercheck.yaml::sweep(bf16)::addition::aggregate"]
    sweep_props = junit["infercheck.yaml::sweep(bf16)::addition::aggregate"]
    for level in sweep["data"]["levels"]:
        assert float(sweep_props[f"infercheck_{level['test']}_kl_mean"]) == level["kl_mean"]
    assert sweep_props["infercheck_cliff"] == sweep["data"]["cliff"]

    # Every item that ran has properties, all scalars (the engines: one JSON string by design).
    self_check = junit["infercheck.yaml::sweep(bf16)::addition::self-check"]
    assert self_check == {"infercheck_self_check_problems": "0"}
    for nodeid, props in junit.items():
        assert props or items[nodeid]["outcome"] in ("skipped", "error"), nodeid
        for name, value in props.items():
            assert name == "infercheck_engines" or not value.startswith(("[", "{", "(")), name

    assert set(results["engines"]) == {"bf16@local", "q4@local", "q8@local"}
    assert set(results["matrices"]) == {"infercheck.yaml"}
    assert results["matrices"]["infercheck.yaml"]["checks"][0]["max_kl"] == 1e-9
    run = results["run"]
    assert run["shard"] is None and run["exitstatus"] == 1
    assert run["argv"][:3] == ["-q", "--junitxml=out.xml", "--infercheck-results=out/r.json"]


def _junit_by_nodeid(path: Path, nodeids: Iterable[str]) -> dict[str, dict[str, str]]:
    """JUnit properties of each of ``nodeids`` (found by pytest's own classname/name)."""
    cases = {
        (case.get("classname"), case.get("name")): {
            p.get("name", ""): p.get("value", "") for p in case.iter("property")
        }
        for case in ET.parse(path).getroot().iter("testcase")
    }
    out = {}
    for nodeid in nodeids:
        names = mangle_test_address(nodeid)
        out[nodeid] = cases[(".".join(names[:-1]), names[-1])]
    return out


def without_batch_sizes(data: dict[str, Any]) -> dict[str, Any]:
    """An item's data without how many prompts shared a batch (it depends on which prompts a
    worker or shard runs); the numbers do not (batching is licensed by a bit-identity probe)."""
    return {k: v for k, v in data.items() if k not in ("base_batch", "test_batch")}


def test_xdist_gives_the_items_of_a_serial_run_with_keyword_and_shard_selection(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(COMPARE_AND_SWEEP)
    ini = pytester.path / "pytest.ini"
    ini.write_text(ini.read_text().rstrip() + "\ninfercheck_results = results/serial.json\n")
    selection = ["-k", "q4", "--infercheck-shard", "2/3"]
    everything = pytester.runpytest("-q", "-k", "q4", "--collect-only")
    all_ids = {line for line in everything.outlines if line.startswith("infercheck.yaml::")}
    pytester.runpytest("-q", *selection)
    parallel = pytester.runpytest_subprocess(
        "-q", "-n", "2", *selection, "--infercheck-results=results/xdist.json"
    )
    parallel.stdout.fnmatch_lines(["infercheck results: results/xdist.json"])
    serial = load_results(pytester.path / "results" / "serial.json")["items"]
    xdist = load_results(pytester.path / "results" / "xdist.json")["items"]
    ids = {i["nodeid"] for i in serial}
    # -k and the shard compose: a strict part of the -k selection, only q4 items.
    assert ids < all_ids and all("q4" in i for i in ids) and len(ids) >= 3
    assert {i["worker"] for i in serial} == {None}
    assert {i["worker"] for i in xdist} == {"gw0", "gw1"}

    def key(item: dict[str, Any]) -> tuple[Any, ...]:
        # how many prompts shared a batch depends on which worker got which prompts
        return (
            item["nodeid"],
            item["outcome"],
            item["violations"],
            without_batch_sizes(item["data"]),
        )

    assert [key(i) for i in xdist] == [key(i) for i in serial]


def test_shards_partition_the_run_and_merge_to_the_unsharded_numbers(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(COMPARE_AND_SWEEP)
    whole = pytester.runpytest("-q", "--infercheck-results=whole.json").parseoutcomes()
    shards = []
    for index in (1, 2, 3):
        run = pytester.runpytest(
            "-q", "--infercheck-shard", f"{index}/3", f"--infercheck-results=s{index}.json"
        )
        shards.append(load_results(pytester.path / f"s{index}.json"))
        assert run.parseoutcomes()["deselected"] == sum(whole.values()) - len(shards[-1]["items"])
    unsharded = load_results(pytester.path / "whole.json")

    # A partition: every non-aggregate item in exactly one shard; aggregates in each shard
    # that ran some of their suite, over that shard's prompts only.
    def non_aggregates(results: dict[str, Any]) -> list[str]:
        return [i["nodeid"] for i in results["items"] if i["role"] != "aggregate"]

    union = [nodeid for shard in shards for nodeid in non_aggregates(shard)]
    assert sorted(union) == sorted(non_aggregates(unsharded)) and len(set(union)) == len(union)
    assert all(len(non_aggregates(shard)) >= 3 for shard in shards)  # 27 items over 3 shards
    for shard in shards:
        assert shard["run"]["shard"]["count"] == 3
        assert shard["run"]["run_id"] == shards[0]["run"]["run_id"]
        compare = [i for i in shard["items"] if i["check"] == "compare(bf16-vs-q4)"]
        aggregate = next(i for i in compare if i["role"] == "aggregate")
        assert aggregate["data"]["levels"][0]["n_prompts"] == len(compare) - 1

    merged, warnings = merge_results(
        [(f"s{i}.json", shard) for i, shard in enumerate(shards, 1)] + [("whole.json", unsharded)]
    )
    assert warnings == [] and len(merged) == 2
    from_shards, whole_run = items_by_id(merged[0]), items_by_id(merged[1])
    assert list(from_shards) == list(whole_run)
    for nodeid, item in whole_run.items():
        other = from_shards[nodeid]
        assert (other["outcome"], other["violations"]) == (item["outcome"], item["violations"])
        if item["role"] != "aggregate":  # batch sizes depend on the shard's prompts
            assert without_batch_sizes(other["data"]) == without_batch_sizes(item["data"])
            continue
        assert other["data"].get("cliff") == item["data"].get("cliff")
        for got, want in zip(other["data"]["levels"], item["data"]["levels"], strict=True):
            assert got.keys() == want.keys()
            for name, value in want.items():
                if isinstance(value, float):  # equal up to the order of float summation
                    assert math.isclose(got[name], value, rel_tol=1e-12), name
                else:
                    assert got[name] == value, name

    # The console script's entry point renders the merged shards beside the unsharded run.
    paths = ["s1.json", "s2.json", "s3.json", "whole.json"]
    # 1: items of the merged shards failed (and their aggregates with them)
    assert cli_main(["report", *(str(pytester.path / p) for p in paths), "-o", "r.html"]) == 1
    assert "run 2 (" in (pytester.path / "r.html").read_text()


@pytest.mark.parametrize("shard", ["0/3", "4/3", "two/3"])
def test_a_bad_shard_is_a_usage_error(pytester: pytest.Pytester, shard: str) -> None:
    result = pytester.runpytest("--infercheck-shard", shard)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--infercheck-shard*"])


def test_sharded_determinism_aggregates_cover_only_their_shard(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    """A single-target aggregate under a shard covers that shard's prompts: the shards'
    aggregates add up to the whole suite, none repeats another's prompts; each defers its
    suite gates to the merge."""
    write_matrix(DETERMINISM + "    min_determinism: 1.0\n")
    covered = []
    for shard in ("1/2", "2/2"):
        out = f"r{shard[0]}.json"
        result = pytester.runpytest(
            "-q", f"--infercheck-shard={shard}", f"--infercheck-results={out}"
        )
        assert result.ret == 0
        result.stdout.fnmatch_lines(
            [f"suite gates deferred to `pytest-infercheck report` (shard {shard}): 1 aggregate*"]
        )
        items = load_results(pytester.path / out)["items"]
        prompts = {i["name"] for i in items if i["role"] == "prompt"}
        (aggregate,) = [i for i in items if i["role"] == "aggregate"]
        assert aggregate["data"]["prompts"] == len(prompts) > 0
        assert aggregate["gates_deferred_to"] == shard
        covered.append(prompts)
    assert not covered[0] & covered[1] and len(covered[0] | covered[1]) == 8


EVERY_IN_PROCESS_KIND = """\
  - compare: {baseline: bf16, test: q4}
    max_kl: 1.0e-3
    flips: {max_rate: 0.9}
  - sweep: {baseline: bf16, models: [q8, q4]}
    max_mean_kl: 1.0e-3
  - determinism: {target: q4, runs: 2}
    min_determinism: 1.0
  - batch-invariance: {target: q4, trials: 1, batch_size: 4}
  - stress: {target: q4, levels: [1, 2, 4], repeats: 1}
  - tokenization: {targets: [bf16, q4]}
  - sampling: {target: q4, samples: 200}
    params: [{temperature: 1.0, top_k: 3}]
    positions: 1
  - request-conformance: {target: q4, top_logprobs: 2}
"""
SERVER_ONLY_KINDS = {
    "cache-parity": "a server's prompt cache",
    "cache-pollution": "a server's hostile requests",
    "stream-parity": "a server's streamed and whole answers",
    "endpoint-parity": "a server's endpoints",
    "structured-parity": "a server's tool-call parser",
}
"""The kinds :data:`EVERY_IN_PROCESS_KIND` leaves out: what each needs that mlx-lm in process
has not (their shards merge through the same ``summarize``)."""
MEASURED_PER_RUN = {
    "latency_p50_s",
    "latency_p95_s",
    "tokens_per_s",
    "achieved_concurrency",
    "measured_by",
    "batched",
    "batch_size",
    "batching_note",
}
"""What each run measures of its own (timings, and the batch sizes of the prompts a shard
ran), left out of the comparison."""


def assert_same_numbers(got: Any, want: Any, where: str = "") -> None:
    """``got`` equals ``want``, floats up to the order of float summation, ignoring what each
    run measures of its own (:data:`MEASURED_PER_RUN`)."""
    if isinstance(want, float) and isinstance(got, float):
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15), where
    elif isinstance(want, dict) and isinstance(got, dict):
        keys = set(want) - MEASURED_PER_RUN
        assert set(got) - MEASURED_PER_RUN == keys, where
        for key in keys:
            assert_same_numbers(got[key], want[key], f"{where}.{key}")
    elif isinstance(want, list) and isinstance(got, list):
        assert len(got) == len(want), where
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same_numbers(g, w, f"{where}[{i}]")
    else:
        assert got == want, where


def test_every_in_process_kind_merges_to_the_unsharded_aggregates(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    """Every kind that runs on mlx-lm in process (all but :data:`SERVER_ONLY_KINDS` and diff),
    unsharded and in two shards; ``pytest-infercheck report --json`` merges the shards into a
    results file whose every aggregate has the unsharded run's outcome, violations and numbers (each
    kind's ``summarize`` over the union of the shards' item records; a stress level is an
    item of one shard, a sweep's self-check too)."""
    write_matrix(EVERY_IN_PROCESS_KIND)
    pytester.runpytest("-q", "--infercheck-results=whole.json")
    for index in (1, 2):
        pytester.runpytest(
            "-q", f"--infercheck-shard={index}/2", f"--infercheck-results=s{index}.json"
        )
    paths = [str(pytester.path / name) for name in ("s1.json", "s2.json")]
    status = cli_main(["report", *paths, "-o", "r.html", "--json", "merged.json"])
    whole = load_results(pytester.path / "whole.json")
    merged = load_results(pytester.path / "merged.json")
    assert merged["run"]["merged_shards"] == [1, 2] and merged["run"]["shard"] is None

    def aggregates(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
        return {i["nodeid"]: i for i in results["items"] if i["role"] == "aggregate"}

    got, want = aggregates(merged), aggregates(whole)
    kinds = {item["kind"] for item in want.values()}
    assert kinds == set(KIND_NAMES) - {"diff"} - set(SERVER_ONLY_KINDS)  # diff: compare's twin
    assert list(got) == list(want)
    for nodeid, item in want.items():
        other = got[nodeid]
        assert (other["outcome"], other["violations"]) == (item["outcome"], item["violations"])
        assert other.get("gates_deferred_to") is None, nodeid
        assert_same_numbers(other["data"], item["data"], nodeid)
    # the report gates on the merged aggregates as pytest gated on the unsharded ones
    failed = [i for i in want.values() if i["outcome"] == "failed"]
    assert status == (1 if failed else 0)
    # each stress level was measured once, in its own shard
    shards = [load_results(path) for path in paths]
    levels = [i["name"] for shard in shards for i in shard["items"] if i["kind"] == "stress"]
    assert sorted(n for n in levels if n != "aggregate") == sorted(["c1", "c2", "c4"])


GATED_COMPARE = """\
  - compare: {baseline: bf16, test: q8}
    flips: {fail_item_on: never, max_rate: 0.35}
"""


def test_shards_defer_a_flip_gate_only_the_whole_suite_can_pass_and_the_merge_judges_it(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    """0 flips in 8 prompts: Wilson upper bound 0.3244 <= 0.35, while a shard's part (at most
    7 prompts: 0.3543) could not pass; the shards defer, the merge passes. A gate the union
    breaks fails the merge, and ``pytest-infercheck report`` exits 1 naming it."""
    write_matrix(GATED_COMPARE)
    whole = pytester.runpytest("-q", "--infercheck-results=whole.json")
    assert whole.ret == 0
    paths = []
    for index in (1, 2):
        run = pytester.runpytest(
            "-q", f"--infercheck-shard={index}/2", f"--infercheck-results=s{index}.json"
        )
        assert run.ret == 0, run.stdout.str()[-2000:]
        items = load_results(pytester.path / f"s{index}.json")["items"]
        (aggregate,) = [i for i in items if i["role"] == "aggregate"]
        (level,) = aggregate["data"]["levels"]
        assert 0 < level["n_answered"] < 8 and level["n_flips"] == 0
        assert level["flip_rate_high"] > 0.35  # would have failed the shard
        assert aggregate["outcome"] == "passed" and aggregate["gates_deferred_to"] == f"{index}/2"
        paths.append(str(pytester.path / f"s{index}.json"))
    assert cli_main(["report", *paths, "-o", str(pytester.path / "r.html")]) == 0

    # The same shards judged with a mean-KL gate the union breaks (every prompt differs a
    # little between bf16 and q8): the merge fails and says which gate.
    for path in paths:
        data = json.loads(Path(path).read_text())
        for item in data["items"]:
            if item["role"] == "aggregate":
                item["thresholds"]["max_mean_kl"] = 1e-12
        Path(path).write_text(json.dumps(data))
    assert cli_main(["report", *paths, "-o", str(pytester.path / "r.html")]) == 1


def test_a_gate_that_cannot_pass_at_the_suites_size_is_a_collection_error(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(GATED_COMPARE.replace("max_rate: 0.35", "max_rate: 0.3"))
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        "infercheck.yaml:8: checks[0].flips.max_rate 0.3 cannot pass with 8 answered prompts "
        "(suite addition): the 95% Wilson upper bound at 0 flips is 0.3244; it needs at least "
        "9 answered prompts"
    ) in result.stdout.lines
