"""structured-parity's judge facet on hand-made evidence, called as the framework calls it
(found by the mutation run, tests/unit/MUTATION.md: no unit test judged an item whose paths
differ): every path against ``chat`` on the same prompt ids, a later target's ``chat``
against the first target's as far as their prompt ids say, ``chat-n2`` held to ``n: 2``,
the rule each finding names and the fields ``allow`` lets differ."""

from __future__ import annotations

from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.structured_parity.evidence import PromptIds
from pytest_infercheck.checks.structured_parity.judge import differing_fields, judge
from pytest_infercheck.checks.structured_parity.spec import StructuredParityThresholds
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
