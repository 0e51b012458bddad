"""Golden baselines on the tiny models: record bf16, replay it against bf16 (passes, KL ~0,
identical tokens) and against the 4-bit model standing in for an upgraded engine (fails the
gate: it turns right answers wrong); refusals; the same bytes recorded twice and under -n 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .helpers import ADDITION, junit_properties, suite_jsonl

# Two easy sums and two that the 4-bit model gets wrong (quickstart e12, e13).
ROWS = [*ADDITION[:2], ("e12", "6+63=", "69"), ("e13", "19+11=", "30")]
GATE = """\
  - compare: {baseline: "golden:adder-v1", test: adder}
    max_kl: 0.01
    flips: {fail_item_on: correct_to_wrong, max_rate: 0.1, gate: point}
    max_mean_kl: 0.005
"""
GOLDEN = Path("goldens/adder-v1.json")


@pytest.fixture
def gate(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> Any:
    """Write the suite and a gate whose model ``adder`` is the given tiny variant."""
    pytester.makefile(".jsonl", addition=suite_jsonl(ROWS))

    def write(variant: str, name: str = "adder", suites: str = "[addition.jsonl]") -> None:
        pytester.makefile(
            ".yaml",
            infercheck=f"models:\n  {name}: {{path: '{tiny_models[variant]}'}}\n"
            f"suites: {suites}\nchecks:\n{GATE.replace('test: adder', f'test: {name}')}",
        )

    return write


def test_record_then_replay_same_and_upgraded_engine(pytester: pytest.Pytester, gate: Any) -> None:
    gate("bf16")
    recorded = pytester.runpytest("-q", "--infercheck-record")
    recorded.assert_outcomes(passed=5)
    recorded.stdout.fnmatch_lines(
        ["*infercheck goldens*", "recorded goldens/adder-v1.json: 4 prompts from adder@local"]
    )
    golden = pytester.path / GOLDEN
    first = golden.read_bytes()
    data = json.loads(first)
    assert data["target"] == "adder@local" and data["engine"]["kind"] == "mlx-lm"
    assert data["model"]["name"] == "adder" and data["tokenizer"]
    s01 = next(e for e in data["prompts"] if e["prompt_id"] == "s01")
    assert s01["output"]["text"] == "46" and s01["output"]["token_ids"][-1] == 2  # EOS kept
    assert len(s01["output"]["top_logprobs"]) == len(s01["output"]["token_ids"])

    pytester.runpytest("-q", "--infercheck-record").assert_outcomes(passed=5)
    assert golden.read_bytes() == first  # deterministic

    same = pytester.runpytest("-q", "--junitxml=same.xml")
    same.assert_outcomes(passed=5)
    props = junit_properties(pytester.path / "same.xml")
    for name in ("s01", "s02", "e12", "e13"):
        assert props[name]["infercheck_method"] == "golden-top-k-lower-bound"
        assert float(props[name]["infercheck_kl_max"]) < 1e-5  # logprobs stored to 1e-6
        assert props[name]["infercheck_first_divergence"] == "None"  # identical token ids
        assert props[name]["infercheck_same_top_rate"] == "1.0"

    gate("q4")  # the same model name, another engine: the upgrade under test
    upgraded = pytester.runpytest("-q", "-rf", "--junitxml=q4.xml")
    upgraded.assert_outcomes(passed=2, failed=3)
    upgraded.stdout.fnmatch_lines(
        [
            "*method: golden-top-k-lower-bound over * positions*",
            "*answers (number): reference '69', baseline '69', test '79' -> correct_to_wrong*",
            "*golden:adder-v1 recorded from adder@local on mlx-lm (mlx *); now adder@local: "
            "mlx-lm (*bits*4*",
            "*adder@local: flip rate (2/4 answered) 0.5 > flips.max_rate 0.1*",
            "*FAILED*::e12*",
            "*FAILED*::e13*",
            "*FAILED*::aggregate*",
        ]
    )
    engines = json.loads(
        junit_properties(pytester.path / "q4.xml")["aggregate"]["infercheck_engines"]
    )
    assert engines["golden:adder-v1"]["quantization"] is None
    assert engines["golden:adder-v1"]["golden"] == str(GOLDEN)
    assert engines["adder@local"]["quantization"]["bits"] == 4


def test_refused_goldens(pytester: pytest.Pytester, gate: Any) -> None:
    gate("bf16")
    pytester.runpytest("-q", "--infercheck-record").assert_outcomes(passed=5)
    golden = pytester.path / GOLDEN
    original = golden.read_text()

    golden.write_text(original.replace(json.loads(original)["tokenizer"], "0123456789abcdef"))
    tampered = pytester.runpytest("-q")
    tampered.assert_outcomes(failed=5)
    tampered.stdout.fnmatch_lines(
        [
            "*golden goldens/adder-v1.json refused as the baseline of adder@local: recorded "
            "with tokenizer 0123456789abcdef, the test side's tokenizer is *"
        ]
    )

    golden.write_text(original)
    gate("bf16", name="other")
    renamed = pytester.runpytest("-q")
    renamed.assert_outcomes(failed=5)
    renamed.stdout.fnmatch_lines(["*recorded from model 'adder', compared with model 'other'*"])

    gate("bf16")
    pytester.makefile(".jsonl", addition=suite_jsonl([*ROWS, ("s09", "1+2=", "3")]))
    grown = pytester.runpytest("-q", "-rf")
    grown.assert_outcomes(passed=4, failed=2)
    grown.stdout.fnmatch_lines(
        ["*no recording of prompt s09 ('1+2=') of suite addition: the suite or the settings*"]
    )


def test_xdist_record_writes_the_serial_bytes(pytester: pytest.Pytester, gate: Any) -> None:
    # two suites, so that the golden's entries come from both workers
    pytester.makefile(".jsonl", more=suite_jsonl(ADDITION[4:6]))
    gate("bf16", suites="[addition.jsonl, more.jsonl]")
    pytester.runpytest_subprocess("-q", "--infercheck-record").assert_outcomes(passed=8)
    serial = (pytester.path / GOLDEN).read_bytes()
    assert len(json.loads(serial)["prompts"]) == 6
    (pytester.path / GOLDEN).unlink()
    parallel = pytester.runpytest_subprocess("-n", "2", "--infercheck-record", "-v")
    parallel.assert_outcomes(passed=8)
    workers = {line.split()[0] for line in parallel.outlines if line.startswith("[gw")}
    assert len(workers) == 2, parallel.outlines  # both workers recorded part of it
    assert (pytester.path / GOLDEN).read_bytes() == serial
    assert [p.name for p in (pytester.path / "goldens").iterdir()] == ["adder-v1.json"]
