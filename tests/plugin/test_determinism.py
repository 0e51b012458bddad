"""determinism and batch-invariance through pytester on mlx-lm in-process (the tiny adder in
bf16 and cast to float32). mlx-lm on CPU is bit-exact across runs and across its own batched
generation (measured on the tiny adder in bf16, float32, q8 and q4: 0 token changes and
logprob differences of exactly 0.0 in 4 x 336 needle trials, batches of 8 and of 56 prompts
of mixed lengths), so the strictest thresholds hold and these tests pass every time. The
failing side of both checks is shown on a real llama-server behind the faulty proxy
(tests/integration/test_determinism_servers.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .helpers import matrix_yaml, suite_jsonl

CHECKS = """\
  - determinism: {target: bf16@local, runs: 4}
    name: det-bf16
    min_determinism: 1.0
    max_logprob_drift: 0.0
  - determinism: {target: bf16@local32, runs: 3}
    name: det-f32
    min_determinism: 1.0
    max_logprob_drift: 0.0
  - batch-invariance: {target: bf16@local, trials: 2, batch_size: 5, seed: 7}
    name: needle-bf16
    logprob_tolerance: 0.0
  - batch-invariance: {target: bf16@local32, trials: 2, batch_size: 5, seed: 7}
    name: needle-f32
    logprob_tolerance: 0.0
"""
BACKENDS = """\
backends:
  local: {kind: mlx-lm}
  local32: {kind: mlx-lm, dtype: float32}
"""


@pytest.fixture
def matrix(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    yaml = matrix_yaml({"bf16": tiny_models["bf16"]}, CHECKS)
    pytester.makefile(".yaml", infercheck=yaml.replace("suites:", BACKENDS + "suites:", 1))


def _cases(path: Path) -> dict[str, dict[str, str]]:
    """``check::item`` -> JUnit properties (the item name alone repeats across checks)."""
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        check = case.get("classname", "").split(".")[-2]
        out[f"{check}::{case.get('name')}"] = {
            p.get("name", ""): p.get("value", "") for p in case.iter("property")
        }
    return out


def test_mlx_lm_is_deterministic_and_batch_invariant(
    pytester: pytest.Pytester, matrix: None
) -> None:
    result = pytester.runpytest("-q", "--junitxml=out.xml")
    result.assert_outcomes(passed=4 * 9)
    cases = _cases(pytester.path / "out.xml")
    for check in ("determinism(det-bf16)", "determinism(det-f32)"):
        for n in range(1, 9):
            props = cases[f"{check}::s0{n}"]
            assert props["infercheck_modal_share"] == "1.0"
            assert props["infercheck_distinct"] == "1"
            assert props["infercheck_errors"] == "0"
            assert props["infercheck_max_logprob_drift"] == "0.0"
        aggregate = cases[f"{check}::aggregate"]
        assert aggregate["infercheck_determinism_score"] == "1.0"
        assert aggregate["infercheck_deterministic_prompts"] == "8"
    # 24 runs pooled (8 prompts x 3): Wilson lower bound z^2/(n+z^2) = 3.8415/27.8415
    low = float(cases["determinism(det-f32)::aggregate"]["infercheck_determinism_score_low"])
    assert low == pytest.approx(1 - 3.8415 / 27.8415, abs=1e-4)
    for check in ("batch-invariance(needle-bf16)", "batch-invariance(needle-f32)"):
        for n in range(1, 9):
            props = cases[f"{check}::s0{n}"]
            assert props["infercheck_trials"] == "2"
            assert props["infercheck_matching_trials"] == "2"
            assert props["infercheck_max_logprob_diff"] == "0.0"
        assert cases[f"{check}::aggregate"]["infercheck_invariant_prompts"] == "8"
    result.stdout.fnmatch_lines(
        [
            "*check*suite*target*runs*identical*score (95% CI)*errors*drift*verdict*",
            "*determinism(det-bf16)*addition*bf16@local*4*8/8*1.0000 (0.893-1.000)*0*0*PASS*",
            "*check*suite*target*trials*invariant*batched by*verdict*",
            "*batch-invariance(needle-f32)*bf16@local32*16*8/8*mlx-lm BatchGenerator*PASS*",
        ]
    )


RECORDER = """
import json

def pytest_runtest_logreport(report):
    record = getattr(report, "infercheck", None)
    if report.when == "call" and record:
        with open("records.jsonl", "a") as out:
            out.write(json.dumps(record) + "\\n")
"""


def _records(pytester: pytest.Pytester, *args: str) -> dict[tuple[str, str], Any]:
    """Run with ``args``; (check node name, item name) -> the item's record data."""
    import json

    pytester.makeconftest(RECORDER)
    (pytester.path / "records.jsonl").unlink(missing_ok=True)
    pytester.runpytest("-q", *args)
    lines = (pytester.path / "records.jsonl").read_text().splitlines()
    return {(r["check"], r["name"]): r["data"] for r in map(json.loads, lines)}


def test_items_record_what_the_html_report_reads(pytester: pytest.Pytester, matrix: None) -> None:
    """Each item's record carries the agreed data keys (plain types, through xdist too)."""
    by = _records(pytester, "-n", "2", "-k", "s03 or aggregate")
    assert len(by) == 8
    det = by[("determinism(det-bf16)", "s03")]
    assert set(det) == {
        "prompt_id", "target", "runs", "modal_share", "distinct", "errors", "error_messages",
        "first_divergences", "max_logprob_drift", "outputs",
    }  # fmt: skip
    ((output,),) = [det["outputs"]]
    assert output["text"] == "15" and output["count"] == 4  # "7+8=" -> "15" + EOS
    assert len(output["token_ids"]) == 3
    assert det["first_divergences"] == [None] * 4 and det["error_messages"] == []
    agg = by[("determinism(det-f32)", "aggregate")]
    assert {"score", "score_low", "score_high", "deterministic_prompts", "engines"} <= set(agg)
    assert agg["engines"]["bf16@local32"]["kind"] == "mlx-lm"
    needle = by[("batch-invariance(needle-bf16)", "s03")]
    assert needle["batched_by"] == "mlx-lm BatchGenerator" and needle["seed"] == 7
    assert needle["alone"] == {"text": "15", "token_ids": output["token_ids"]}
    for trial in needle["trials"]:
        assert len(trial["batch"]) == 5 and trial["batch"][trial["position"]] == "s03"
        assert trial["match"] and trial["first_divergence"] is None
    # Companions mix lengths: some are repeated prompts ("s05*2").
    companions = [n for t in needle["trials"] for n in t["batch"] if n != "s03"]
    assert any("*" in n for n in companions) and any("*" not in n for n in companions)


def test_the_seed_fixes_the_batches(pytester: pytest.Pytester, matrix: None) -> None:
    first = _records(pytester, "-k", "needle-bf16 and s01")[
        ("batch-invariance(needle-bf16)", "s01")
    ]
    again = _records(pytester, "-k", "needle-bf16 and s01")[
        ("batch-invariance(needle-bf16)", "s01")
    ]
    assert first["trials"] == again["trials"]


def test_mlx_lm_batch_follows_the_generation_convention(
    tiny_models: dict[str, Path], random_model: Path
) -> None:
    """``generate_batch`` (mlx-lm's BatchGenerator) equals ``generate`` alone, EOS and its
    logprob included, on the adder (stops) and on the random model (non-trivial logprobs,
    runs to max_tokens); prompts of mixed lengths share the batch."""
    from pytest_infercheck.backends import GenerationParams, PromptInput
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec

    params = GenerationParams(max_tokens=6)
    for path in (tiny_models["bf16"], random_model):
        backend = MlxLmBackend("t", MlxModelSpec(str(path)))
        prompts = [backend.render_sync(t, None, False) for t in ("7+8=", "12+34=" * 3, "1+2=")]
        batched = backend.generate_batch_sync(prompts, params)
        for prompt, got in zip(prompts, batched, strict=True):
            alone = backend.generate_sync(prompt, params)
            assert not isinstance(got, BaseException)
            assert (got.token_ids, got.text, got.finish_reason) == (
                alone.token_ids,
                alone.text,
                alone.finish_reason,
            )
            assert got.chosen_logprobs == alone.chosen_logprobs
            assert got.token_ids is not None and got.chosen_logprobs is not None
            assert len(got.chosen_logprobs) == len(got.token_ids)
            assert got.batched == 3
    adder = MlxLmBackend("t", MlxModelSpec(str(tiny_models["bf16"])))
    first = adder.generate_batch_sync([adder.render_sync("7+8=", None, False)], params)[0]
    assert not isinstance(first, BaseException) and first.finish_reason == "stop"
    assert first.token_ids is not None and first.token_ids[-1] == 2 and first.text == "15"
    empty = PromptInput("", (), False)
    zero, failed = adder.generate_batch_sync(
        [adder.render_sync("7+8=", None, False), empty], GenerationParams(max_tokens=0)
    )
    assert not isinstance(zero, BaseException) and zero.token_ids == []
    assert isinstance(failed, Exception) and "zero tokens" in str(failed)
