"""Truncation (:mod:`pytest_infercheck.backends.prompt_count`): an engine that counts fewer
prompt tokens than were sent fails the item as ``truncated``, naming both counts; one that
adds its own (BOS, a template) passes; one that reports no count is said, not passed."""

from __future__ import annotations

import warnings

import pytest

from pytest_infercheck.backends.base import Backend, Generation, PromptInput
from pytest_infercheck.backends.prompt_count import (
    PromptTruncated,
    check_prompt_count,
    sent_ids,
    truncated,
    truncation_text,
)
from pytest_infercheck.checks.framework.failures import request_failure
from pytest_infercheck.verdict.conduct import Conduct, conduct_violations


class _Named(Backend):
    kind = "fake"

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        raise NotImplementedError

    async def generate(self, prompt: PromptInput, params: object) -> Generation:  # type: ignore[override]
        raise NotImplementedError


def _gen(prompt_tokens: int | None, *others: int | None) -> Generation:
    g = Generation("x", [1], "length", prompt_tokens=prompt_tokens)
    g.others = tuple(Generation("y", [2], "length", prompt_tokens=p) for p in others)
    return g


def test_fewer_counted_than_sent_is_truncated_more_is_not() -> None:
    assert truncated(512, 2048) is True
    assert truncated(2047, 2048) is True
    assert truncated(2048, 2048) is False
    assert truncated(2049, 2048) is False  # a BOS the engine added
    assert truncated(2060, 2048) is False  # a template's tokens
    assert truncated(None, 2048) is None
    assert truncated(512, None) is None
    assert truncation_text(512, 2048) == (
        "the server counted 512 prompt tokens of the 2048 sent: truncated"
    )


def test_sent_ids_counts_an_id_prompt_only() -> None:
    assert sent_ids([1, 2, 3]) == 3
    assert sent_ids([]) == 0
    assert sent_ids("1+1=") is None
    assert sent_ids(None) is None
    assert sent_ids([[1, 2]]) is None  # a batch of prompts is not one prompt's ids


def test_a_truncated_generation_raises_naming_both_counts() -> None:
    backend = _Named("srv")
    with pytest.raises(PromptTruncated) as info:
        check_prompt_count(backend, _gen(5), 10)
    assert str(info.value) == (
        "backend 'srv': the server counted 5 prompt tokens of the 10 sent: truncated"
    )
    assert (info.value.counted, info.value.sent) == (5, 10)
    # another choice of an n > 1 request counted apart and cut fails too
    with pytest.raises(PromptTruncated):
        check_prompt_count(backend, _gen(10, 10, 4), 10)


def test_a_faithful_count_passes_and_is_recorded() -> None:
    backend = _Named("srv")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        g = check_prompt_count(backend, _gen(11, None), 10)  # BOS added; other uncounted
    assert g.prompt_sent == 10
    assert g.others[0].prompt_sent == 10


def test_unmeasured_is_said_once_per_backend_and_reason(caplog: pytest.LogCaptureFixture) -> None:
    backend = _Named("srv")
    with caplog.at_level("WARNING", logger="pytest_infercheck.truncation"):
        check_prompt_count(backend, _gen(None), 10)
        check_prompt_count(backend, _gen(None), 12)
        check_prompt_count(backend, _gen(7), None, why="sent as text")
    texts = [r.getMessage() for r in caplog.records]
    assert texts == [
        "backend 'srv' (fake): truncation not measured: the engine reported no prompt token count",
        "backend 'srv' (fake): truncation not measured: sent as text",
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="pytest_infercheck.truncation"):
        check_prompt_count(_Named("srv"), _gen(None), 10)  # another backend object says it again
    assert len(caplog.records) == 1


def test_the_verdict_rule_is_truncated_with_both_counts() -> None:
    failure = request_failure("test q@llama", "the generation", PromptTruncated("b", 3, 9))
    assert failure.rule == "truncated"
    violations = conduct_violations(Conduct(failures=[failure]))
    assert [(v.source, v.text) for v in violations] == [
        (
            "truncated",
            "test q@llama: the generation: the server counted 3 prompt tokens of the 9 "
            "sent: truncated",
        )
    ]
