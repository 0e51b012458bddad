"""A conversation compared turn by turn: every turn the sides generate, on the baseline's
history.

The baseline fills in the conversation's ``generate`` turns
(:meth:`~pytest_infercheck.generation_cache.GenerationCache.conversation`); its turns are the
history of both sides, so each generated turn and the final one are compared on identical
prompts (:func:`.inputs.decide_inputs` over the same concrete turns; the gather facet,
:mod:`.gather_prompt`, generates them). Each generated turn's two outputs are judged by the
one sameness rule (:mod:`~pytest_infercheck.metrics.sameness`, :func:`judge_turns`); the
final turn is the item's full comparison (:class:`.prompt.PromptComparison`).

The record (:class:`TurnComparison`) lists every turn of the conversation, given ones with
their text, and the final answer last; :func:`first_divergent_turn` is the index of the first
turn whose two outputs differ. Turn indexes count the conversation's turns from 0 (a system
turn is turn 0); the final answer's index is the number of turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from ...metrics.consistency import Reading, empty_fault, output_text, read_generation
from ...metrics.faults import Fault
from .evidence import TurnEvidence, outputs_verdict

if TYPE_CHECKING:
    from collections.abc import Sequence

TurnKind = Literal["given", "generated", "final"]


@dataclass(frozen=True)
class TurnComparison:
    """One turn of a compared conversation (a field of :class:`.prompt.PromptComparison`)."""

    index: int
    """The turn's index in the conversation (0-based; the final answer: the number of
    turns)."""
    role: str
    """``system``, ``user`` or ``assistant``."""
    kind: TurnKind
    """``given`` (the suite's text), ``generated`` (a ``generate`` turn: each side's output
    on the baseline's history) or ``final`` (the answer to the last user turn)."""
    base_text: str
    """A given turn's text; of a generated or final turn, the baseline's output (what the
    conversation continues with)."""
    test_text: str | None = None
    """The test side's output (None for a given turn)."""
    same: bool | None = None
    """Whether the two outputs are the same (the sameness rule; None for a given turn)."""
    sameness: str | None = None
    """The sameness verdict in words (``identical``, ``token ids differ from token 3``)."""
    first_divergence: int | None = None
    """Where the two outputs first differ, in :attr:`divergence_unit` (None: the same)."""
    divergence_unit: str | None = None
    """``token`` or ``char``."""


def judge_turns(
    turns: Sequence[TurnEvidence],
) -> tuple[list[TurnComparison], list[Fault], list[Reading]]:
    """Every turn of a conversation before its final answer (:class:`~.evidence.
    TurnEvidence`, gathered on the baseline's history): given turns as they are, each
    generated turn's two outputs compared by the one sameness rule. Returns the turns, the
    generation faults of the generated turns' outputs, named by turn (an empty output
    against a non-empty one among them, as for the final turn, whatever the gates), and
    each of those outputs' reading (the one reading of every generation,
    :func:`~pytest_infercheck.metrics.consistency.read_generation`: its faults and its
    degenerate finding). Pure."""
    out: list[TurnComparison] = []
    faults: list[Fault] = []
    readings: list[Reading] = []
    for turn in turns:
        if turn.kind == "given":
            out.append(TurnComparison(turn.index, turn.role, "given", turn.text))
            continue
        base, other, inputs = turn.base, turn.other, turn.inputs
        assert base is not None and other is not None and inputs is not None
        index = turn.index
        verdict = outputs_verdict(inputs, base, other)
        out.append(
            TurnComparison(
                index,
                turn.role,
                "generated",
                base.text,
                other.text,
                verdict.same,
                verdict.describe(),
                verdict.first_divergence,
                verdict.divergence_unit,
            )
        )
        for where, generation in (("baseline", base), ("test", other)):
            reading = read_generation(f"the {where} output of turn {index}", generation)
            readings.append(reading)
            faults.extend(reading.faults)
        empty = empty_fault(
            (output_text(base.text, base.tool_calls), base.token_ids, base.finish_reason),
            (output_text(other.text, other.tool_calls), other.token_ids, other.finish_reason),
            a_name=f"the baseline output of turn {index}",
            b_name=f"the test output of turn {index}",
        )
        if empty is not None:
            faults.append(empty)
    return out, faults, readings


def first_divergent_turn(turns: list[TurnComparison]) -> int | None:
    """The index of the first generated or final turn whose outputs are not the same; None
    when every one is."""
    return next((t.index for t in turns if t.same is False), None)
