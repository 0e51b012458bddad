"""The ids that tie a conversation's tool results to the calls they answer.

A request's assistant turns carry calls without ids (:class:`~..tools.ToolCall` has none)
and its ``tool`` turns may or may not name the call they answer (``tool_call_id``). Every
wire shape needs both ends: OpenAI ``tool_calls[].id`` / ``tool_call_id``, Anthropic
``tool_use.id`` / ``tool_result.tool_use_id``. :func:`link_calls` gives them, one rule for
every path, so every path sends the same conversation.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .records import ChatTurn


@dataclass(frozen=True)
class LinkedTurn:
    """A turn with the ids its wire shape needs."""

    turn: ChatTurn
    call_ids: tuple[str, ...] = ()
    """An assistant turn: the id of each of its calls, in order."""
    answers: str | None = None
    """A ``tool`` turn: the id of the call it answers."""


def link_calls(messages: Sequence[ChatTurn]) -> tuple[LinkedTurn, ...]:
    """Each turn with its ids. The rule:

    - The ``k``-th call of the assistant turn at index ``i`` gets the id ``call_{i}_{k}``,
      unless a tool turn answering it names another id (its ``tool_call_id``): then that
      one, so both ends agree.
    - A ``tool`` turn answers the earliest call not yet answered of the assistant turns
      before it whose function is the turn's ``name`` (a turn without a name: the earliest
      call not yet answered).

    Raises:
        ValueError: a ``tool`` turn that answers no call (none before it is unanswered, or
            none has its function's name): the conversation cannot be sent.
    """
    ids: dict[tuple[int, int], str] = {}
    answered: dict[int, tuple[int, int]] = {}
    open_calls: list[tuple[int, int]] = []
    for i, turn in enumerate(messages):
        if turn.role == "assistant":
            open_calls.extend((i, k) for k in range(len(turn.tool_calls)))
        elif turn.role == "tool":
            match = next(
                (
                    slot
                    for slot in open_calls
                    if turn.name is None or messages[slot[0]].tool_calls[slot[1]].name == turn.name
                ),
                None,
            )
            if match is None:
                what = f"a call of {turn.name!r}" if turn.name is not None else "a call"
                raise ValueError(f"message {i} (tool) answers no call: no {what} before it is open")
            open_calls.remove(match)
            answered[i] = match
            if turn.tool_call_id is not None:
                ids[match] = turn.tool_call_id
    linked: list[LinkedTurn] = []
    for i, turn in enumerate(messages):
        if turn.role == "assistant" and turn.tool_calls:
            calls = tuple(ids.get((i, k), f"call_{i}_{k}") for k in range(len(turn.tool_calls)))
            linked.append(LinkedTurn(turn, call_ids=calls))
        elif turn.role == "tool":
            slot = answered[i]
            linked.append(LinkedTurn(turn, answers=ids.get(slot, f"call_{slot[0]}_{slot[1]}")))
        else:
            linked.append(LinkedTurn(turn))
    return tuple(linked)
