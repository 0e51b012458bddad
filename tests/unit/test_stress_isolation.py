"""stress with ``beside`` (adapter isolation), pure parts against hand-computed values: the
logprob difference of an output from its reference, a level of several models (each output
compared with its own model's reference, changes counted and named by model), the default
``logprob_tolerance`` that applies only with ``beside``, and the options' validation."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from pytest_infercheck.checks.stress import Output, Reference, StressEvidence, level_data
from pytest_infercheck.checks.stress.measure import logprob_shift, ref_key
from pytest_infercheck.checks.stress.records import SideCount
from pytest_infercheck.checks.stress.spec import StressSpec
from pytest_infercheck.metrics.ties import SideTokens
from pytest_infercheck.suites import Prompt
from tests.unit.engine_verdicts import thresholds, violations


def prompt(pid: str) -> Prompt:
    return Prompt(pid, f"{pid}=", None, 5, None, None, None, "t:1")


def out(pid: str, side: str, ids: list[int], lps: list[float | None]) -> Output:
    tokens = SideTokens(ids=ids, texts=None, chosen=lps, top=None)
    text = "".join(str(i) for i in ids)
    return Output(pid, 0.0, 1.0, text, ids, len(ids), tokens=tokens, side=side)


def ref(ids: list[int], lps: list[float | None]) -> Reference:
    return Reference("".join(str(i) for i in ids), ids, chosen_logprobs=lps)


def test_logprob_shift_by_hand() -> None:
    # |-0.5 - -0.25| = 0.25 at 1 is the largest; position 2 is past upto
    assert logprob_shift([-1.0, -0.5, -3.0], [-1.0, -0.25, -0.0], 2) == (0.25, 1)
    # unreported and non-finite positions are skipped; none left: None
    assert logprob_shift([None, -1.0], [-2.0, math.nan], 2) is None
    assert logprob_shift(None, [-1.0], 1) is None
    assert logprob_shift([-1.0], [-1.0], 1) == (0.0, 0)  # bit-equal is 0, not None


REFS = {
    ref_key("base", "a"): ref([5, 7, 2], [-0.1, -0.2, -0.3]),
    ref_key("tuned", "a"): ref([5, 8, 2], [-0.1, -0.5, -0.3]),
}


def test_a_level_of_two_models_compares_each_with_its_own_reference() -> None:
    outputs = [
        out("a", "base", [5, 7, 2], [-0.1, -0.2, -0.3]),  # equal to base's
        out("a", "tuned", [5, 8, 2], [-0.1, -0.5, -0.3]),  # equal to tuned's
        out("a", "base", [5, 8, 2], [-0.1, -0.5, -0.3]),  # base answered with tuned: token 1
        out("a", "tuned", [5, 8, 2], [-0.1, -0.45, -0.3]),  # tuned's tokens, logprob +0.05
    ]
    data = level_data(2, "base@llama", outputs, REFS, [prompt("a")])
    assert data.consistent == 3 and data.requests == 4
    # base: the changed output differs at token 1, so only token 0 is compared (0)
    assert data.sides["base"] == SideCount(requests=2, consistent=1, logprob_diff=0.0)
    tuned = data.sides["tuned"]
    assert list(data.sides) == ["base", "tuned"]
    assert (tuned.requests, tuned.consistent) == (2, 2)
    assert tuned.logprob_diff == pytest.approx(0.05)
    (mismatch,) = data.mismatches
    assert (mismatch.side, mismatch.prompt_id, mismatch.first_divergence) == ("base", "a", 1)
    assert data.logprob_diff == pytest.approx(0.05)
    worst = data.logprob_worst
    assert worst is not None and (worst.side, worst.request, worst.token) == ("tuned", 3, 1)

    measures = StressEvidence(data).measures
    consistency = measures["consistency"]
    assert consistency.qualifier == (  # type: ignore[union-attr]
        "3/4 outputs equal to their reference; changed: base 1/2 (a at token 1)"
    )
    diff = measures["logprob_diff"]
    assert diff.qualifier == (  # type: ignore[union-attr]
        "largest at request 3 (tuned, a) token 1; by model: base 0, tuned 0.05"
    )


def test_the_default_tolerance_applies_with_beside_only() -> None:
    outputs = [
        out("a", "base", [5, 7, 2], [-0.1, -0.2, -0.3]),
        out("a", "tuned", [5, 8, 2], [-0.1, -0.45, -0.3]),  # +0.05 at token 1
    ]
    data = level_data(1, "base@llama", outputs, REFS, [prompt("a")])
    found = violations("stress", StressEvidence(data), thresholds("stress"), "level")
    assert found == [
        "logprobs moved by 0.05 > logprob_tolerance 0.0001 (largest at request 1 (tuned, a) "
        "token 1; by model: base 0, tuned 0.05)"
    ]
    # written: the framework's gate judges it, not the default
    loose = thresholds("stress", logprob_tolerance=0.1)
    assert violations("stress", StressEvidence(data), loose, "level") == []
    tight = thresholds("stress", logprob_tolerance=0.01)
    (gate,) = violations("stress", StressEvidence(data), tight, "level")
    assert gate.startswith("largest |logprob difference| from the reference (largest at")
    assert gate.endswith("0.05 > logprob_tolerance 0.01")

    # without beside (no side): the same logprob move is not gated by default
    tokens = SideTokens([5, 8, 2], None, [-0.1, -0.45, -0.3], None)
    plain = [Output("a", 0.0, 1.0, "582", [5, 8, 2], 3, tokens=tokens)]
    alone = level_data(1, "m", plain, {"a": ref([5, 8, 2], [-0.1, -0.5, -0.3])}, [prompt("a")])
    assert alone.sides == {} and alone.logprob_diff == pytest.approx(0.05)
    assert violations("stress", StressEvidence(alone), thresholds("stress"), "level") == []


def test_written_tolerance_without_logprobs_fails_unmeasured() -> None:
    no_lps = [Output("a", 0.0, 1.0, "582", [5, 8, 2], 3, side="tuned")]
    data = level_data(1, "base@llama", no_lps, REFS, [prompt("a")])
    assert data.logprob_diff is None
    written = thresholds("stress", logprob_tolerance=0.0)
    (found,) = violations("stress", StressEvidence(data), written, "level")
    assert "no output and its reference both carry logprobs" in found
    # unwritten: nothing to gate on a server that gives no logprobs
    assert violations("stress", StressEvidence(data), thresholds("stress"), "level") == []


def test_beside_options() -> None:
    spec = StressSpec.model_validate({"target": "base@llama", "beside": ["tuned", "tuned2"]})
    sides = spec.test_sides(("checks", 0, "stress"))
    assert [(s.label, s.ref, s.loc) for s in sides] == [
        ("tuned", "tuned@llama", ("checks", 0, "stress", "beside", 0)),
        ("tuned2", "tuned2@llama", ("checks", 0, "stress", "beside", 1)),
    ]
    assert StressSpec.model_validate({"target": "base", "beside": ["t"]}).beside_refs() == ["t"]
    assert StressSpec.model_validate({"target": "base"}).test_sides(()) == []
    with pytest.raises(ValidationError, match="MODEL, not MODEL@BACKEND"):
        StressSpec.model_validate({"target": "base@llama", "beside": ["tuned@vllm"]})
    with pytest.raises(ValidationError, match="beside names each model once"):
        StressSpec.model_validate({"target": "base@llama", "beside": ["t", "t"]})


def test_an_empty_output_names_its_model() -> None:
    outputs = [out("a", "tuned", [], [])]
    data = level_data(1, "base@llama", outputs, REFS, [prompt("a")])
    (fault,) = data.faults
    assert fault.text == (
        "empty generation in 1 of 1 requests: request 0 (tuned, a) generated no tokens while "
        "its reference generated 3"
    )
