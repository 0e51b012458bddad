"""structured-parity's judge facet on hand-made evidence, called as the framework calls it
(found by the mutation run, tests/unit/MUTATION.md: no unit test judged an item whose paths
differ): every path against ``chat`` on the same prompt ids, a later target's ``chat``
against the first target's as far as their prompt ids say, ``chat-n2`` held to ``n: 2``,
the rule each finding names and the fields ``allow`` lets differ; and the aggregate of
judged items, counted by hand."""

from __future__ import annotations

from pytest_infercheck.checks.framework.items import RecordedItem
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.structured_parity.evidence import PromptIds
from pytest_infercheck.checks.structured_parity.judge import differing_fields, judge
from pytest_infercheck.checks.structured_parity.records import (
    PathCounts,
    StructuredParityContext,
    TargetCounts,
)
from pytest_infercheck.checks.structured_parity.spec import StructuredParityThresholds
from pytest_infercheck.checks.structured_parity.summarize import summarize
from pytest_infercheck.structured.results import NotAnswered
from pytest_infercheck.tools import ToolCall
from pytest_infercheck.verdict.conduct import Conduct
from pytest_infercheck.verdict.gate import Violation

from .test_structured_parity import choice, response
from .test_structured_probe import ADD, CALLED, evidence

PLAN = ItemPlan("tu001", "prompt", "tu001", "proxied")
LLAMA_CHAT = response("chat", choice(ADD), usage=(39, 12))
"""The first target's chat answer: the same call, 39 prompt tokens (this target's: 40)."""


def test_every_path_is_held_to_chat_and_chat_n2_to_two_choices() -> None:
    """chat-stream calls add(b=35) on 41 prompt tokens against chat's add(b=34) on 40;
    chat-n2 answered one choice to n: 2; the first target's chat counted 39 prompt tokens
    on the same prompt ids."""
    stream = response("chat-stream", choice(ToolCall("add", {"a": 12, "b": 35})), usage=(41, 12))
    n2 = response("chat-n2", choice(ADD), usage=(40, 12))
    e = evidence(
        [("chat", CALLED), ("chat-stream", stream), ("chat-n2", n2)], Conduct(), LLAMA_CHAT
    )
    judged = judge(PLAN, e, StructuredParityThresholds())
    assert judged.violations == [
        Violation("n: chat-n2 returned 1 choices for n: 2", "invalid"),
        Violation(
            'tool_calls differ: chat-stream vs chat: call 1 (add) arguments add({"a":12,"b":35}) '
            'vs add({"a":12,"b":34})',
            "tool_calls",
        ),
        Violation(
            "usage.prompt_tokens: chat-stream 41 vs chat 40 (the same prompt ids)",
            "usage.prompt_tokens",
        ),
        Violation(
            "usage.prompt_tokens: proxied chat 40 vs llama chat 39 (the same prompt ids)",
            "usage.prompt_tokens",
        ),
    ]
    record = judged.record
    assert (record.prompt_id, record.target, record.side, record.reference_target) == (
        "tu001",
        "tiny@proxied",
        "proxied",
        "tiny@llama",
    )
    assert [(c.side, c.reference) for c in record.comparisons] == [
        ("chat-stream", "chat"),
        ("chat-n2", "chat"),
        ("proxied chat", "llama chat"),
    ]
    assert record.reference_chat is not None and record.reference_chat.target == "tiny@llama"
    assert record.prompt_ids == "same (40 ids)"
    assert differing_fields(record) == ["tool_calls", "usage.prompt_tokens"]
    # allow lets a field differ: only the rest fails.
    allowed = judge(PLAN, e, StructuredParityThresholds(allow=["usage.prompt_tokens"]))
    assert [v.source for v in allowed.violations] == ["invalid", "tool_calls"]


def test_a_later_targets_usage_is_judged_only_on_the_same_prompt_ids() -> None:
    e = evidence([("chat", CALLED)], Conduct(), LLAMA_CHAT)
    e.prompt_ids = PromptIds(False, "differ (40 and 39 ids)")
    judged = judge(PLAN, e, StructuredParityThresholds())
    assert judged.violations == []
    (across,) = judged.record.comparisons
    assert across.notes == [
        "usage.prompt_tokens proxied chat 40 vs llama chat 39: not judged (prompt ids differ)"
    ]
    assert judged.record.prompt_ids == "differ (40 and 39 ids)"
    e.prompt_ids = PromptIds(None, "not known: no tokenize endpoint")
    (unknown,) = judge(PLAN, e, StructuredParityThresholds()).record.comparisons
    assert unknown.notes[0] == "prompt ids not known: no tokenize endpoint"


def test_a_first_target_has_no_reference_chat() -> None:
    judged = judge(PLAN, evidence([("chat", CALLED)], Conduct()), StructuredParityThresholds())
    assert judged.violations == [] and judged.record.comparisons == []
    assert judged.record.reference_chat is None and judged.record.prompt_ids is None
    assert differing_fields(judged.record) == []


# -- the aggregate of judged items -------------------------------------------------------------
def test_the_aggregate_counts_every_path_target_field_and_fault_by_hand() -> None:
    """tu001 (proxied): the item above (chat-stream's call and usage differ, chat-n2 one
    choice, the cross-target usage differs), usage allowed; tu002 (proxied): chat answered,
    messages unsupported (404), chat-stream an error; tu003[llama] errored."""
    allow = StructuredParityThresholds(allow=["usage.prompt_tokens"])
    stream = response("chat-stream", choice(ToolCall("add", {"a": 12, "b": 35})), usage=(41, 12))
    n2 = response("chat-n2", choice(ADD), usage=(40, 12))
    bad = judge(
        PLAN,
        evidence(
            [("chat", CALLED), ("chat-stream", stream), ("chat-n2", n2)], Conduct(), LLAMA_CHAT
        ),
        allow,
    )
    partial = judge(
        PLAN,
        evidence(
            [
                ("chat", CALLED),
                ("messages", NotAnswered("unsupported", "HTTP 404")),
                ("chat-stream", NotAnswered("error", "HTTP 500: x")),
            ],
            Conduct(),
        ),
        allow,
    )
    items = [
        RecordedItem("prompt", "tu002[proxied]", partial.record),
        RecordedItem(
            "prompt", "tu001[proxied]", bad.record, violations=tuple(v.text for v in bad.violations)
        ),
        RecordedItem("prompt", "tu003[llama]", None, "BackendError: down"),
    ]
    context = StructuredParityContext(
        "tiny@llama, tiny@proxied", ["tiny@llama", "tiny@proxied"], ["llama", "proxied"], {}
    )
    summary = summarize(items, allow, context)
    data = summary.record
    assert (data.items, data.passed, data.failed) == (3, 1, ["tu001[proxied]", "tu003[llama]"])
    assert (data.n_errors, data.errors) == (1, {"tu003[llama]": "BackendError: down"})
    assert data.differences == {"tool_calls": 1, "usage.prompt_tokens": 2}
    assert (data.allowed, data.failed_answers, data.invalid) == (2, 1, {"choices": 1})
    assert data.unsupported == {"tiny@proxied messages": "HTTP 404"}
    assert data.paths == {
        "chat": PathCounts(answered=2),
        "chat-stream": PathCounts(answered=1, failed=1, compared=1, differing=1),
        "chat-n2": PathCounts(answered=1, compared=1),
        "messages": PathCounts(unsupported=1),
        "cross-target": PathCounts(compared=1),
    }
    assert data.per_target == {
        "llama": TargetCounts(items=1, passed=0, differences=0, invalid=0, unsupported=0, errors=1),
        "proxied": TargetCounts(
            items=2, passed=1, differences=1, invalid=1, unsupported=1, errors=1
        ),
    }
    assert summary.text.splitlines() == [
        "tiny@llama, tiny@proxied: 1/3 items pass; differences: tool_calls 1, "
        "usage.prompt_tokens 2 (2 allowed); invalid: choices 1; 1 unsupported path(s); 1 "
        "failed answers, 1 errored items",
        "  chat: 2 answered, 0 unsupported, 0 failed, 0/0 differing",
        "  chat-stream: 1 answered, 0 unsupported, 1 failed, 1/1 differing",
        "  chat-n2: 1 answered, 0 unsupported, 0 failed, 0/1 differing",
        "  messages: 0 answered, 1 unsupported, 0 failed, 0/0 differing",
        "  cross-target: 0 answered, 0 unsupported, 0 failed, 0/1 differing",
        "  unsupported: tiny@proxied messages: HTTP 404",
    ]
    assert summary.properties == [
        ("infercheck_items", 3),
        ("infercheck_passed", 1),
        ("infercheck_errors", 1),
        ("infercheck_failed_answers", 1),
        ("infercheck_unsupported", 1),
        ("infercheck_invalid", 1),
        ("infercheck_differences", 3),
        ("infercheck_differences_tool_calls", 1),
        ("infercheck_differences_usage_prompt_tokens", 2),
    ]


def test_a_later_target_whose_prompt_ids_are_unknown_says_so() -> None:
    e = evidence([("chat", CALLED)], Conduct(), LLAMA_CHAT)
    e.prompt_ids = None
    judged = judge(PLAN, e, StructuredParityThresholds())
    assert judged.violations == [] and judged.record.prompt_ids is None
    (across,) = judged.record.comparisons
    assert across.notes == [
        "usage.prompt_tokens proxied chat 40 vs llama chat 39: not judged (prompt ids not known "
        "to be the same)"
    ]


def test_the_aggregate_adds_up_each_targets_items() -> None:
    """tu001 and tu002 (proxied) pass with chat answered, messages unsupported, chat-stream
    an error and chat-n2 not exercised; tu003[proxied] errored; tu004, named without a
    target, errored without a message: it counts for the first target."""
    t = StructuredParityThresholds()
    answers = [
        ("chat", CALLED),
        ("messages", NotAnswered("unsupported", "")),
        ("chat-stream", NotAnswered("error", "HTTP 500: x")),
        ("chat-n2", NotAnswered("not exercised", "n: 2 needs tools")),
    ]
    ok = judge(PLAN, evidence(answers, Conduct()), t).record
    items = [
        RecordedItem("prompt", "tu001[proxied]", ok),
        RecordedItem("prompt", "tu002[proxied]", ok),
        RecordedItem("prompt", "tu003[proxied]", None, "BackendError: down"),
        RecordedItem("prompt", "tu004", None),
    ]
    context = StructuredParityContext(
        "tiny@llama", ["tiny@llama", "tiny@proxied"], ["llama", "proxied"], {"e": {}}
    )
    summary = summarize(items, t, context)
    data = summary.record
    assert data.per_target == {
        "llama": TargetCounts(items=1, passed=0, differences=0, invalid=0, unsupported=0, errors=1),
        "proxied": TargetCounts(
            items=3, passed=2, differences=0, invalid=0, unsupported=2, errors=3
        ),
    }
    assert data.errors == {"tu003[proxied]": "BackendError: down", "tu004": "error"}
    assert data.unsupported == {"tiny@proxied messages": ""}
    assert (data.target, data.sides, data.engines) == (
        "tiny@llama",
        ["llama", "proxied"],
        {"e": {}},
    )
    assert summary.text.splitlines()[0] == (
        "tiny@llama, tiny@proxied: 2/4 items pass; differences: none; invalid: none; 1 "
        "unsupported path(s); 2 failed answers, 2 errored items"
    )
    assert "  chat-n2: 0 answered, 0 unsupported, 2 not exercised, 0 failed, 0/0 differing" in (
        summary.text.splitlines()
    )
