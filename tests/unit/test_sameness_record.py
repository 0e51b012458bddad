"""A sameness verdict as item data and JSON hold it (:meth:`Sameness.to_dict`): every field
plain, ``calls_equal`` only where a side returned tool calls apart (found by the mutation
run, tests/unit/MUTATION.md)."""

from __future__ import annotations

from pytest_infercheck.metrics.sameness import Basis, Sameness

PLAIN = {
    "same": False,
    "basis": "ids+text",
    "ids_equal": False,
    "token_texts_equal": None,
    "text_equal": False,
    "first_divergence": 3,
    "divergence_unit": "token",
}


def test_a_verdict_without_tool_calls_has_no_calls_equal_key() -> None:
    verdict = Sameness(False, Basis.IDS_TEXT, False, False, 3, "token")
    assert verdict.to_dict() == PLAIN


def test_a_verdict_with_tool_calls_says_whether_they_are_equal() -> None:
    same_calls = Sameness(False, Basis.IDS_TEXT, False, False, 3, "token", calls_equal=True)
    assert same_calls.to_dict() == {**PLAIN, "calls_equal": True}
    other_calls = Sameness(False, Basis.IDS_TEXT, False, False, 3, "token", calls_equal=False)
    assert other_calls.to_dict() == {**PLAIN, "calls_equal": False}
