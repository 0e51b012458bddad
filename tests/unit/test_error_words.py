"""The words of the matrix's errors: suggestions that ignore case, pydantic's errors in ours."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator

from pytest_infercheck.strict import nearest, plain_message, unknown_key
from pytest_infercheck.suite_files import bundled_suite_names, suggest_suite


@pytest.mark.parametrize(
    ("word", "options", "meant"),
    [
        ("vLLM", ["mlx-lm", "vllm", "vllm-mlx"], "vllm"),  # equal but for case
        ("Compar", ["compare", "sweep"], "compare"),  # near, once lowered
        ("MAX_KLL", ["max_kl", "max_mean_kl"], "max_kl"),
        ("max_kl", ["max_kl"], None),  # itself: nothing to suggest
        ("zzz", ["compare", "sweep"], None),
        ("4", [4, "q4"], None),  # YAML keys may be numbers
    ],
)
def test_nearest_ignores_case(word: str, options: list[Any], meant: str | None) -> None:
    assert nearest(word, options) == meant


def test_unknown_key_names_the_nearest_or_all() -> None:
    assert (
        unknown_key("Max_KL", ["max_kl", "flips"])
        == "unknown key 'Max_KL' (did you mean 'max_kl'?)"
    )
    assert unknown_key("zzz", ["b", "a"]) == "unknown key 'zzz' (expected one of: a, b)"


class _Model(BaseModel):
    fail_on: Any = None
    rate: float = Field(default=0.0, ge=0, le=1)
    runs: int = Field(default=2, gt=1)
    label: str = "x"
    names: list[str] = Field(default_factory=lambda: ["a", "b"], min_length=2)
    one: list[str] = Field(default_factory=lambda: ["a"], min_length=1)

    @field_validator("fail_on")
    @classmethod
    def _choice(cls, value: Any) -> Any:
        if value not in (None, "any", "decisive"):
            raise ValueError("fail_on is any or decisive")
        return value


def _said(**data: Any) -> list[str]:
    with pytest.raises(ValidationError) as info:
        _Model.model_validate(data)
    return [plain_message(e) for e in info.value.errors()]


def test_pydantic_errors_in_our_words() -> None:
    assert _said(fail_on="x") == ["fail_on is any or decisive"]  # no "Value error, "
    assert _said(rate=1.5) == ["must be <= 1, got 1.5"]
    assert _said(rate=-0.25) == ["must be >= 0, got -0.25"]
    assert _said(runs=1) == ["must be > 1, got 1"]
    assert _said(runs="many") == ["expected an integer, got 'many'"]
    assert _said(rate="lots") == ["expected a number, got 'lots'"]
    assert _said(label=3) == ["expected a string, got 3"]
    assert _said(names=["a"]) == ["needs at least 2 entries"]
    assert _said(one=[]) == ["needs at least 1 entry"]


def test_a_choice_names_the_choices_and_the_nearest() -> None:
    error = {
        "type": "literal_error",
        "ctx": {"expected": "'any' or 'decisive'"},
        "input": "Any",
        "msg": "Input should be 'any' or 'decisive'",
    }
    assert plain_message(error) == "expected 'any' or 'decisive', got 'Any' (did you mean 'any'?)"


def test_suite_suggestion_spells_a_file_as_written(tmp_path: Path) -> None:
    (tmp_path / "addition.jsonl").write_text("{}\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "mine.yaml").write_text("[]\n")
    names = bundled_suite_names()
    assert suggest_suite("adition", tmp_path, names) == "addition.jsonl"
    assert suggest_suite("addition", tmp_path, names) == "addition.jsonl"  # by its stem
    assert suggest_suite("sub/mne.yaml", tmp_path, names) == "sub/mine.yaml"
    assert suggest_suite("REASONING", tmp_path, names) == "reasoning"
    assert suggest_suite("nothing-like-it", tmp_path, names) is None
