"""Margins never from an ambiguous text key, end to end: two OpenAI-compatible servers that
return token texts but no ids (their top-k keyed by text) part at a byte token that reads
U+FFFD. The baseline's top-k holds another byte token under that same text (0xC3 at
-0.6936); the test side chose 0xE2, which the baseline ranks below its top-2. Read through
the text key, the baseline's margin was 0xC3's number, 0.0005 nats, marked exact: with the
test side's exact 0.0005 a ``near-tie``, and ``fail_on: decisive`` waived the differing
outputs: the item passed. The baseline's margin is now a lower bound (``log p(a) -
max(top-k)`` = 0), the label ``unknown``, and the item fails on ``min_similarity``.

The servers are scripted (:mod:`tests.http.fake_server`): no real server emits this on
demand. Each answers the logprob negotiation's probe (the prompt ``1``) with a plain answer
and every generation with its output."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.http.fake_server import Reply, Script, chat_answer, fake_server

from .helpers import suite_jsonl

FFFD = "\ufffd"


def _answer(steps: list[tuple[str, float, list[tuple[str, float]]]]) -> dict[str, Any]:
    """A chat completion whose logprobs give each step's token text, logprob and top-k
    (texts only, no ids)."""
    return {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "".join(t for t, _, _ in steps)},
                "finish_reason": "length",
                "logprobs": {
                    "content": [
                        {
                            "token": token,
                            "logprob": logprob,
                            "top_logprobs": [{"token": t, "logprob": lp} for t, lp in top],
                        }
                        for token, logprob, top in steps
                    ]
                },
            }
        ]
    }


class Server(Script):
    """The probe prompt ``1`` gets a plain answer with logprobs; every other request the
    scripted generation."""

    def __init__(self, generation: dict[str, Any]) -> None:
        super().__init__([Reply(body=generation)])
        self.probe = Reply(body=chat_answer("1", [("1", -0.1)]))

    def next(self) -> Reply:
        payload = self.requests[-1]["json"] or {}
        messages = payload.get("messages") or []
        if messages and messages[-1].get("content") == "1":
            return self.probe
        return super().next()


FIRST = ("4", -0.01, [("4", -0.01), ("5", -5.0)])
BASELINE = _answer([FIRST, ("a", -0.6931, [("a", -0.6931), (FFFD, -0.6936)])])
TEST = _answer([FIRST, (FFFD, -0.6930, [(FFFD, -0.6930), ("a", -0.6935)])])


def test_a_divergence_at_a_byte_token_read_through_its_text_is_not_a_near_tie(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl([("b01", "12+34=", "46")]))
    base, test = Server(BASELINE), Server(TEST)
    with fake_server(base) as base_url, fake_server(test) as test_url:
        pytester.makefile(
            ".yaml",
            infercheck=f"models:\n  m: {{path: '{tiny_models['bf16']}'}}\n"
            "backends:\n"
            f"  a: {{kind: openai, url: '{base_url}'}}\n"
            f"  b: {{kind: openai, url: '{test_url}'}}\n"
            "suites: [addition.jsonl]\nchecks:\n"
            "  - compare: {baseline: m@a, test: m@b}\n"
            "    min_similarity: 1.0\n"
            "    flips: {fail_item_on: never}\n"
            "    fail_on: decisive\n",
        )
        result = pytester.runpytest_subprocess("-q", "-rf", "--infercheck-results=r.json")
    items = {i["name"]: i for i in json.loads((pytester.path / "r.json").read_text())["items"]}
    data = items["b01"]["data"]
    assert data["base_text"] == "4a" and data["test_text"] == f"4{FFFD}", data
    assert data["first_divergence"] == 1
    # The baseline's margin: "a" (-0.6931) against the text U+FFFD, which its top-k holds
    # for some byte token: only a bound, -0.6931 - max(-0.6931, -0.6936) = 0. The test
    # side's: its own U+FFFD (-0.6930, its entry's number) against "a" (-0.6935): 0.0005.
    assert data["margins"] == [pytest.approx(0.0, abs=1e-12), pytest.approx(0.0005, abs=1e-9)]
    assert data["margins_exact"] is False
    assert data["divergence_label"] == "unknown"  # main: near-tie, margins 0.0005 exact
    assert items["b01"]["outcome"] == "failed", result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "first divergence at token 1: unknown (margins: baseline 0, test 0.0005 nats "
            "(>= : a lower bound from a top-k)*",
            "*FAILED*::b01 - text similarity*",
        ]
    )
