"""The parity and cache-pollution checks without a server: the comparison functions on
hand-made generations, the stream and message parsers on recorded server output, and the
error an in-process target gets."""

from __future__ import annotations

import math

import pytest

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.backends.http import DONE, HttpError, parse_event_line
from pytest_infercheck.backends.openai_compat import assemble_chunks, parse_message
from pytest_infercheck.checks.cache_pollution import ChangedOutput, changed_outputs
from pytest_infercheck.checks.parity import compare_generations
from pytest_infercheck.suites import Prompt


def prompt(answer_kind: str | None = "number") -> Prompt:
    return Prompt("s01", "12+34=", None, 5, "46", answer_kind, None, "addition.jsonl:1")


def gen(text: str, ids: list[int] | None = None, logprobs: list[float] | None = None) -> Generation:
    return Generation(text=text, token_ids=ids, finish_reason="stop", chosen_logprobs=logprobs)


def test_identical_generations_match_with_their_logprob_drift() -> None:
    # Position 2 of a was not reported (llama-server: NaN with an empty top-k map): skipped.
    a = gen("46", [55, 57, 2], [-0.5, -0.25, float("nan")])
    a.top_logprobs = [{55: -0.5}, {57: -0.25}, {}]
    b = gen("46", [55, 57, 2], [-0.5, -0.125, -1.0])
    result = compare_generations(prompt(), a, b)
    assert result.match and result.first_divergence is None and result.divergence_unit is None
    assert result.similarity == 1.0
    assert result.logprob_drift == 0.125  # |-0.25 - -0.125|; the unreported position is skipped
    assert result.answers == ["46", "46"] and result.flip == "unchanged"
    assert result.faults == []


def test_a_nan_logprob_is_a_fault_and_its_drift_is_nan() -> None:
    # A NaN the server did report (no top-k map says otherwise) is never skipped.
    a = gen("46", [55, 57, 2], [-0.5, -0.25, float("nan")])
    b = gen("46", [55, 57, 2], [-0.5, -0.125, -1.0])
    result = compare_generations(prompt(), a, b, ("non-streamed", "streamed"))
    assert result.logprob_drift is not None and math.isnan(result.logprob_drift)
    assert [f.text for f in result.faults] == [
        "non-finite logprob in the non-streamed output at position 2 (NaN)"
    ]


def test_a_dropped_token_diverges_by_id_and_flips_the_answer() -> None:
    result = compare_generations(prompt(), gen("46", [55, 57, 2]), gen("4", [55, 2]))
    assert not result.match
    assert (result.first_divergence, result.divergence_unit) == (1, "token")
    assert result.similarity == pytest.approx(2 * 1 / 3)  # difflib: 2*M/T, M=1, T=3
    assert result.flip == "correct_to_wrong" and result.logprob_drift is None


def test_text_only_generations_diverge_by_character() -> None:
    result = compare_generations(prompt(None), gen("abcd"), gen("abXd"))
    assert (result.first_divergence, result.divergence_unit) == (2, "char")
    assert result.similarity == 0.75 and result.flip is None


def test_same_ids_different_text_is_no_match() -> None:
    result = compare_generations(prompt(None), gen("46", [55, 57]), gen("47", [55, 57]))
    assert not result.match
    assert (result.first_divergence, result.divergence_unit) == (1, "char")


def test_changed_outputs() -> None:
    before = [("a", gen("46", [55, 57, 2])), ("b", gen("75")), ("c", gen("15"))]
    after = [("a", gen("47", [55, 58, 2])), ("b", gen("75")), ("c", gen("16"))]
    assert changed_outputs(before, after) == [
        ChangedOutput(
            prompt_id="a", before="46", after="47", first_divergence=1, divergence_unit="token"
        ),
        ChangedOutput(
            prompt_id="c", before="15", after="16", first_divergence=1, divergence_unit="char"
        ),
    ]
    # The same ids with another text (detokenization) is a change too; equal text with other
    # ids as well: sameness needs both.
    detok = [("a", gen("4 6", [55, 57, 2]))]
    assert changed_outputs(before[:1], detok)[0].divergence_unit == "char"
    retok = [("a", gen("46", [55, 99, 2]))]
    assert changed_outputs(before[:1], retok)[0].first_divergence == 1


def test_sse_and_ndjson_lines() -> None:
    assert parse_event_line('data: {"content": "4"}') == {"content": "4"}
    assert parse_event_line("data: [DONE]") is DONE
    assert parse_event_line("event: content_block_delta") is None
    assert parse_event_line(": keep-alive") is None
    assert parse_event_line("   ") is None
    assert parse_event_line('{"response": "4"}', sse=False) == {"response": "4"}
    with pytest.raises(HttpError, match="malformed stream event"):
        parse_event_line("data: {not json")


def test_assemble_chat_chunks_as_vllm_mlx_streams_them() -> None:
    chunks = [
        {"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "4"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {"content": "6"}, "finish_reason": None}]},
        {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": {}},
        {"choices": [], "usage": {"completion_tokens": 3}},
    ]
    generation = assemble_chunks(chunks, chat=True)
    assert (generation.text, generation.finish_reason) == ("46", "stop")
    assert generation.chosen_logprobs is None


def test_assemble_completion_chunks_with_logprobs() -> None:
    entry = {"token": "4", "logprob": -0.5, "top_logprobs": [{"token": "4", "logprob": -0.5}]}
    chunks = [
        {"choices": [{"text": "4", "logprobs": {"content": [entry]}, "finish_reason": None}]},
        {"choices": [{"text": "6", "finish_reason": "length"}]},
    ]
    generation = assemble_chunks(chunks, chat=False)
    assert (generation.text, generation.finish_reason) == ("46", "length")
    assert generation.chosen_logprobs == [-0.5] and generation.token_texts == ["4"]


def test_parse_anthropic_message() -> None:
    answer = {
        "type": "message",
        "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "46"}],
        "stop_reason": "end_turn",
    }
    generation = parse_message(answer)
    assert (generation.text, generation.finish_reason) == ("46", "stop")
    assert generation.reasoning == "hm"
    with pytest.raises(HttpError):
        parse_message({"error": "x"})


def test_in_process_target_is_an_error_naming_server_backends(
    pytester: pytest.Pytester, write_matrix: object
) -> None:
    write_matrix(  # type: ignore[operator]
        "  - stream-parity: bf16\n"
        "  - endpoint-parity: bf16\n"
        "  - cache-pollution: {target: bf16, hostile: [disconnect]}"
    )
    result = pytester.runpytest("-q", "-p", "no:cacheprovider")
    # 8 prompts + aggregate, 8 prompts x 1 other endpoint + aggregate, 1 hostile + aggregate
    assert result.parseoutcomes() == {"failed": 9 + 9 + 2}, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*stream-parity needs a server backend (openai, vllm, vllm-mlx, llama-server, ollama): "
            "bf16@local runs in-process (mlx-lm)*",
            "*cache-pollution needs a server backend*",
        ]
    )
