"""A sameness verdict as item data and JSON hold it (:meth:`Sameness.to_dict`): every field
plain, ``calls_equal`` only where a side returned tool calls apart (found by the mutation
run, tests/unit/MUTATION.md), and what two generations are compared on."""

from __future__ import annotations

from pytest_infercheck.backends import Generation
from pytest_infercheck.metrics.sameness import Basis, Sameness, returned_calls, same_generation
from pytest_infercheck.tools import ToolCall

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


def test_two_generations_are_compared_on_their_token_texts_without_ids() -> None:
    """Same text "ok", no ids, token texts ["o", "k"] against ["ok"]: they part at token 0."""
    a = Generation("ok", None, "stop", token_texts=["o", "k"])
    b = Generation("ok", None, "stop", token_texts=["ok"])
    assert same_generation(a, b) == Sameness(
        False, Basis.TOKEN_TEXTS_TEXT, None, True, 0, "token", token_texts_equal=False
    )


def test_two_generations_differ_by_the_tool_calls_returned_apart() -> None:
    """Same ids and text; one returned a call apart: not the same, from character 2 (after
    the text), with calls_equal False."""
    called = Generation("ok", [1, 2], "stop", tool_calls=[ToolCall("add", {"a": 1})])
    plain = Generation("ok", [1, 2], "stop")
    assert returned_calls(called) == '[{"arguments":{"a":1},"name":"add"}]'
    assert returned_calls(plain) == ""
    assert same_generation(called, plain) == Sameness(
        False, Basis.IDS_TEXT, True, True, 2, "char", calls_equal=False
    )
    assert same_generation(plain, called) == Sameness(
        False, Basis.IDS_TEXT, True, True, 2, "char", calls_equal=False
    )
    assert same_generation(plain, plain).calls_equal is None
