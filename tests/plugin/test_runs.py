"""Real runs through pytester on the tiny models: thresholds that must pass and must fail,
--lf, -x, -n 2, the sweep self-check and cliff, JUnit properties, a diff's ``expect:`` and
ungated checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import junit_properties

SELF_COMPARE = """\
  - compare: {baseline: bf16, test: bf16}
    max_kl: 0.0
    flips: {fail_item_on: any, max_rate: 0.0, gate: point}
    max_mean_kl: 0.0
    min_same_top: 1.0
"""
Q4_STRICT = """\
  - compare: {baseline: bf16, test: q4}
    max_kl: 1.0e-9
"""
Q4_LOOSE = """\
  - compare: {baseline: bf16, test: q4}
    max_kl: 10.0
    flips: {fail_item_on: never}
"""


def test_compare_with_itself_passes_with_kl_exactly_zero(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(SELF_COMPARE)
    result = pytester.runpytest("-q", "--junitxml=out.xml")
    result.assert_outcomes(passed=9)
    props = junit_properties(pytester.path / "out.xml")
    for name in ("s01", "s04", "s08"):
        assert props[name]["infercheck_method"] == "teacher-forced"
        assert props[name]["infercheck_kl_mean"] == "0.0"
        assert props[name]["infercheck_kl_max"] == "0.0"
        assert props[name]["infercheck_flip"] == "unchanged"
    result.stdout.fnmatch_lines(
        [
            "*infercheck summary*",
            "compare(bf16-vs-bf16) addition:",
            "  bf16@local *0/8 *8/8 *0±0 *PASS",
        ]
    )


def test_q4_diverges_and_fails_a_tight_threshold(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(Q4_STRICT)
    result = pytester.runpytest("-q", "--junitxml=out.xml")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 6, outcomes  # KL > 1e-9 on (nearly) every prompt
    props = junit_properties(pytester.path / "out.xml")
    kls = [float(p["infercheck_kl_mean"]) for n, p in props.items() if n.startswith("s0")]
    assert len(kls) == 8 and all(k >= 0 for k in kls) and max(kls) > 0
    result.stdout.fnmatch_lines(
        ["*prompt s0*", "*method: teacher-forced over * positions*", "*> max_kl 1e-09*"]
    )


def test_q4_passes_a_loose_threshold(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(Q4_LOOSE)
    pytester.runpytest("-q").assert_outcomes(passed=9)


def test_last_failed_and_exitfirst(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(Q4_STRICT)
    first = pytester.runpytest("-q", "-p", "cacheprovider").parseoutcomes()
    rerun = pytester.runpytest("-q", "-p", "cacheprovider", "--lf").parseoutcomes()
    assert rerun.get("failed") == first.get("failed") and "passed" not in rerun
    stopped = pytester.runpytest("-q", "-x").parseoutcomes()
    assert stopped.get("failed") == 1


def test_xdist_two_workers_same_outcome_and_summary(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix(Q4_STRICT + SELF_COMPARE)
    serial = pytester.runpytest_subprocess("-q").parseoutcomes()
    parallel = pytester.runpytest_subprocess("-q", "-n", "2")
    assert parallel.parseoutcomes() == serial
    assert serial["failed"] >= 6 and serial["passed"] >= 9
    parallel.stdout.fnmatch_lines(
        ["*infercheck summary*", "compare(bf16-vs-q4) addition:", "  q4@local *FAIL"]
    )


def test_sweep_self_check_cliff_and_flip_gate(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(
        "  - sweep: {baseline: bf16, models: [q8, q4]}\n"
        "    flips: {fail_item_on: never, max_rate: 0.0, gate: point}\n"
    )
    result = pytester.runpytest("-q", "-rA", "--junitxml=out.xml")
    result.stdout.fnmatch_lines(["*sweep(bf16) addition: degradation cliff: *"])
    result.stdout.fnmatch_lines(["PASSED infercheck.yaml::sweep(bf16)::addition::self-check"])
    props = junit_properties(pytester.path / "out.xml")
    assert "infercheck_cliff" in props["aggregate"]
    # Prompt items never fail on flips here; only the aggregate's flip-rate gate can.
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 17


def test_self_check_fails_loudly_on_a_perturbed_baseline(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix("  - sweep: {baseline: bf16, models: [q4]}\n")
    pytester.makeconftest(
        """
from pytest_infercheck.backends.mlx_lm import MlxLmBackend

original = MlxLmBackend.generate_sync
calls = {"n": 0}


def perturbed(self, prompt, params):
    generation = original(self, prompt, params)
    calls["n"] += 1
    if calls["n"] % 2 == 0:  # every second generation is off by one token
        generation.token_ids = [*generation.token_ids[:-1], 7]
    return generation


# Put back at the end: in-process runs share the backend module with later runs.
def pytest_configure(config):
    MlxLmBackend.generate_sync = perturbed


def pytest_unconfigure(config):
    MlxLmBackend.generate_sync = original
"""
    )
    result = pytester.runpytest("-q", "-k", "self-check", "--infercheck-results=r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*baseline self-check FAILED*", "*s0*: token ids differ*"])
    # the record names the prompts that did not reproduce: the cliff's first level
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    (check,) = [i["data"] for i in items if i["role"] == "self-check"]
    assert check["failed"] and check["failed"] == [p.split(":")[0] for p in check["problems"]]
    again = pytester.runpytest("-q", "-k", "self-check or aggregate", "--infercheck-results=r.json")
    again.assert_outcomes(failed=2)  # the aggregate fails with its self-check
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    (aggregate,) = [i["data"] for i in items if i["role"] == "aggregate"]
    (check,) = [i["data"] for i in items if i["role"] == "self-check"]
    first = aggregate["cliff_steps"][0]
    assert first["level"] == "self-check" and first["failed"] == sorted(check["failed"])
    assert first["kl_mean"] is None  # the baseline did not reproduce: no mean KL


def test_item_failure_shows_both_outputs_and_answers(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    write_matrix("  - compare: {baseline: bf16, test: q4}\n    min_similarity: 1.0\n")
    result = pytester.runpytest("-q")
    if result.parseoutcomes().get("failed"):
        result.stdout.fnmatch_lines(
            ["*baseline bf16@local: *", "*test     q4@local: *", "*answers (number): reference*"]
        )


def test_max_tokens_option_caps_generation(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(SELF_COMPARE)
    result = pytester.runpytest("-q", "--infercheck-max-tokens", "1", "--junitxml=out.xml")
    result.assert_outcomes(passed=9)
    props = junit_properties(Path(pytester.path / "out.xml"))
    # With one token the answer is cut: "46" becomes "4", still identical on both sides.
    assert props["s01"]["infercheck_kl_mean"] == "0.0"


def test_keyword_and_last_failed_under_xdist(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix(Q4_STRICT + SELF_COMPARE)
    picked = pytester.runpytest_subprocess("-q", "-n", "2", "-k", "q4 and (s01 or s02)")
    picked.assert_outcomes(failed=2)
    pytester.runpytest_subprocess("-q", "-n", "2", "-p", "cacheprovider")
    rerun = pytester.runpytest_subprocess("-q", "-n", "2", "-p", "cacheprovider", "--lf")
    outcomes = rerun.parseoutcomes()
    assert outcomes.get("failed", 0) >= 6 and "passed" not in outcomes, outcomes
    rerun.stdout.no_fnmatch_line("*compare(bf16-vs-bf16)*")


def test_diff_passes_on_identical_engines_and_fails_on_different_arithmetic(
    pytester: pytest.Pytester, write_matrix: Any
) -> None:
    # Same weights, two mlx-lm backends: bf16 arithmetic vs float32 arithmetic.
    write_matrix(
        "  - diff: {model: bf16, backends: [local, same]}\n    name: same\n    max_kl: 0.0\n"
        "  - diff: {model: bf16, backends: [local, f32]}\n    name: f32\n    max_kl: 0.0\n"
    )
    text = (pytester.path / "infercheck.yaml").read_text()
    text = text.replace(
        "suites:",
        "backends:\n  local: {kind: mlx-lm}\n  same: {kind: mlx-lm, chat: false}\n"
        "  f32: {kind: mlx-lm, dtype: float32}\nsuites:",
    )
    (pytester.path / "infercheck.yaml").write_text(text)
    result = pytester.runpytest("-q")
    result.stdout.fnmatch_lines(["diff(f32) *:", "  *@f32 *FAIL"])
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 9  # the whole diff(same) suite: KL exactly 0
    assert outcomes["failed"] >= 1
    result.stdout.no_fnmatch_line("*diff(same)*FAILED*")


# -- expect: and ungated ---------------------------------------------------------------------
# The tiny adder's bf16 weights answer "1+0=" with 1 in bf16 arithmetic and with 2 in float32
# (the one prompt of the quickstart's suite where they differ); "12+34=" gives the same
# tokens in both. No reference answers: no answer flip can fail an item.
PAIR = (
    '{"id": "one", "prompt": "1+0=", "max_tokens": 5}\n'
    '{"id": "add", "prompt": "12+34=", "max_tokens": 5}\n'
)


def _pair_matrix(pytester: pytest.Pytester, models: dict[str, Path], checks: str) -> int:
    """Write the pair suite and a matrix with two mlx-lm backends (bf16 and float32
    arithmetic) and ``checks``; returns the line of the first check entry."""
    pytester.makefile(".jsonl", pair=PAIR)
    lines = [
        "models:",
        f"  bf16: {{path: '{models['bf16']}'}}",
        f"  q4: {{path: '{models['q4']}'}}",
        "backends:",
        "  local: {kind: mlx-lm}",
        "  f32: {kind: mlx-lm, dtype: float32}",
        "suites: [pair.jsonl]",
        "checks:",
    ]
    pytester.makefile(".yaml", infercheck="\n".join(lines) + "\n" + checks)
    return len(lines) + 1


def _results(pytester: pytest.Pytester) -> dict[str, dict[str, object]]:
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    return {item["name"]: item for item in items}


DIFF = "  - diff: {model: bf16, backends: [local, f32]}\n"
NOT_IDENTICAL = "outputs not identical: token ids differ from token 0 (expect: identical)"


def test_a_diff_without_thresholds_fails_the_items_whose_outputs_differ(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    _pair_matrix(pytester, tiny_models, DIFF)
    result = pytester.runpytest("-q", "--infercheck-results=r.json", "--junitxml=out.xml")
    result.assert_outcomes(passed=1, failed=2)  # one[f32] and the aggregate naming it
    items = _results(pytester)
    assert items["one[f32]"]["outcome"] == "failed"
    assert items["aggregate"]["violations"] == [f"1 of 2 items failed: one[f32] ({NOT_IDENTICAL})"]
    assert items["one[f32]"]["violations"] == [NOT_IDENTICAL]
    assert items["add[f32]"]["outcome"] == "passed"
    assert items["aggregate"]["thresholds"] == {
        "flips": {"fail_item_on": "correct_to_wrong", "confidence": 0.95, "gate": "upper"},
        "expect": "identical",
        "require_engaged": False,
        "tie_margin": 0.01,
        "fail_on": "any",
    }
    aggregate = items["aggregate"]["data"]
    assert isinstance(aggregate, dict) and aggregate["ungated"] is False
    assert [(lv["n_identical"], lv["n_failed"]) for lv in aggregate["levels"]] == [(1, 1)]
    result.stdout.fnmatch_lines(
        [
            "*baseline bf16@local: *1",
            "*test     bf16@f32: *2",
            f"*{NOT_IDENTICAL}*",
            "*test*failed*identical*verdict*",
            "diff(bf16) pair:",
            "  bf16@f32 *1/2 *1/2 *FAIL",
        ]
    )
    result.stdout.no_fnmatch_line("*UngatedCheckWarning*")
    assert junit_properties(pytester.path / "out.xml")["aggregate"]["infercheck_ungated"] == (
        "False"
    )


def test_expect_identical_fails_a_changed_token_within_a_loose_budget(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    _pair_matrix(pytester, tiny_models, DIFF + "    expect: identical\n    max_kl: 10.0\n")
    result = pytester.runpytest("-q", "--infercheck-results=r.json")
    result.assert_outcomes(passed=1, failed=2)  # one[f32] and its aggregate
    assert _results(pytester)["one[f32]"]["violations"] == [NOT_IDENTICAL]


def test_a_diff_on_a_budget_passes_within_a_loose_max_kl(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    _pair_matrix(pytester, tiny_models, DIFF + "    expect: budget\n    max_kl: 10.0\n")
    result = pytester.runpytest("-q", "--infercheck-results=r.json")
    result.assert_outcomes(passed=3)
    aggregate = _results(pytester)["aggregate"]["data"]
    assert isinstance(aggregate, dict) and aggregate["ungated"] is False
    result.stdout.fnmatch_lines(["diff(bf16) pair:", "  bf16@f32 *0/2 *1/2 *PASS"])
    result.stdout.no_fnmatch_line("*UngatedCheckWarning*")
    # and the same budget too tight for the changed token fails it on KL alone
    _pair_matrix(pytester, tiny_models, DIFF + "    expect: budget\n    max_kl: 1.0e-9\n")
    tight = pytester.runpytest("-q", "--infercheck-results=r.json")
    violations = _results(pytester)["one[f32]"]["violations"]
    assert isinstance(violations, list) and len(violations) == 1
    assert violations[0].startswith("mean KL ") and violations[0].endswith("> max_kl 1e-09")
    assert tight.parseoutcomes()["failed"] >= 1


def test_an_ungated_compare_is_marked_and_warned_about_at_its_line(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """The issue: a compare with no thresholds passed whatever its outputs. It still passes,
    but every report says that nothing was checked, and the run warns at its line."""
    line = _pair_matrix(
        pytester,
        tiny_models,
        "  - compare: {baseline: bf16@local, test: bf16@f32}\n"
        "  - diff: {model: bf16, backends: [local, f32]}\n    expect: budget\n",
    )
    result = pytester.runpytest("-q", "--infercheck-results=r.json", "--junitxml=out.xml")
    result.assert_outcomes(passed=6)  # both outputs of "1+0=" differ, and nothing fails
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    aggregates = [i for i in items if i["role"] == "aggregate"]
    assert [(i["kind"], i["data"]["ungated"]) for i in aggregates] == [
        ("compare", True),
        ("diff", True),
    ]
    result.stdout.fnmatch_lines(  # fnmatch: [[] is a literal [
        [
            f"*UngatedCheckWarning: infercheck.yaml:{line}: checks[[]0] (compare) is ungated: no "
            "gate written (none of max_kl, max_kl_position, min_similarity, max_mean_kl, "
            "min_same_top, flips.max_rate): it passes whatever the outputs*",
            f"*UngatedCheckWarning: infercheck.yaml:{line + 1}: checks[[]1] (diff) is ungated: *"
            "(expect: budget)*",
            "*infercheck summary*",
            "compare(bf16.local-vs-bf16.f32) pair:",
            "  bf16@f32 *0/2 *1/2 *UNGATED",
            "diff(bf16) pair:",
            "  bf16@f32 *0/2 *1/2 *UNGATED",
        ]
    )
    props = junit_properties(pytester.path / "out.xml")
    assert props["aggregate"]["infercheck_ungated"] == "True"
