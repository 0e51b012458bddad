"""Which structured paths a server offers, probed once before a check's requests (a
backend's :meth:`~pytest_infercheck.backends.base.Backend.probe_abilities` calls
:func:`probe_paths`).

A check calls a path ``unsupported`` only when this probe found it lacking
(:meth:`~pytest_infercheck.verdict.conduct.Abilities.unsupported` of :func:`ability`); a
refusal (4xx) or failure (5xx) of the check's own request on any other path fails its item.

**The probe.** One minimal request per path, in order (``chat`` first: the control of the
others): :data:`PROBE`, a system turn and a user turn of its own, no tools, at temperature
0, one token (``max_tokens: 1``), sent by the backend's own client through
:meth:`~.records.StructuredChat.structured`. The probe's prompt shares no more than the chat
template's first tokens with a suite's prompts. Five requests per target, each generating
one token.

**What it decides** for each path, by what the request got back:

- an answer (readable): offered; ``chat-n2`` only when it holds two choices: one choice is
  lacking (``n: 2 answered 1 choice: the server ignores n``, vllm-mlx 0.6.0 and
  mlx_lm.server measured so);
- HTTP 404, 405 or 501: lacking (the endpoint is not there: mlx_lm.server's
  ``/v1/messages`` answers 404);
- HTTP 400 or 422 on ``chat-n2`` where ``chat`` answered: lacking, the server refuses the
  parameter ``n: 2`` (llama-server with one slot: 400 "Field 'n': Value must be between 1
  <= value <= 1"; vLLM: 400 "n must be 1 when using greedy sampling"). A stream is not
  excused so (no engine measured refuses ``stream: true`` with a 400; the generation-path
  probe of :mod:`~pytest_infercheck.backends.endpoint_probe` holds streams to 404/405/501
  too);
- a path the client cannot send at all (:class:`~.records.Inexpressible`: Ollama has no
  ``messages``, no ``n``): lacking, with why, and nothing sent;
- anything else (a 5xx, a 400 on ``chat`` or ``messages`` themselves, no answer, an answer
  that cannot be read): not decided; the check sends its requests and judges them, so a
  broken server fails rather than being excused.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..backends.base import BackendError
from ..verdict.conduct import Abilities
from .records import (
    ChatTurn,
    Inexpressible,
    MalformedResponse,
    Path,
    RequestFailed,
    StructuredChat,
    StructuredRequest,
    StructuredResponse,
)
from .request import with_n

PROBE = StructuredRequest(
    messages=(
        ChatTurn("system", "Ability probe."),
        ChatTurn("user", "Say hi."),
    ),
    max_tokens=1,
)
"""The probe's request (each path sends it in its own shape; ``chat-n2`` with ``n: 2``)."""
ORDER: tuple[Path, ...] = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")
"""The paths probed, ``chat-n2`` after its control ``chat``."""
PARAMETER_OF: dict[Path, Path] = {"chat-n2": "chat"}
"""A path that is another path with a parameter a server may refuse (``n: 2``), and that
path (the control: it must have answered)."""
ABSENT = frozenset({404, 405, 501})
"""Statuses that say the endpoint is not there."""
REFUSED = frozenset({400, 422})
"""Statuses that say the server refuses a parameter (read so only on a path of
:data:`PARAMETER_OF` whose control answered)."""


def ability(path: Path) -> str:
    """The ability name of a structured path (``structured chat-n2``)."""
    return f"structured {path}"


def decide(
    path: Path, got: StructuredResponse | BaseException, offered: set[Path]
) -> tuple[bool | None, str]:
    """Whether the probe of ``path`` shows it offered (True), lacking (False) or neither
    (None: not decided), and what the probe saw. ``offered``: the paths found answering so
    far (the controls of :data:`PARAMETER_OF`)."""
    if isinstance(got, StructuredResponse):
        if path == "chat-n2" and len(got.choices) != 2:
            n = len(got.choices)
            return False, f"n: 2 answered {n} choice{'s' if n != 1 else ''}: the server ignores n"
        return True, "answered"
    if isinstance(got, Inexpressible):
        return False, str(got)
    if isinstance(got, RequestFailed):
        if got.status in ABSENT:
            return False, f"the probe got HTTP {got.status}: {got.message}"
        base = PARAMETER_OF.get(path)
        if got.status in REFUSED and base is not None and base in offered:
            return False, (f"the probe got HTTP {got.status} where {base} answered: {got.message}")
    if isinstance(got, MalformedResponse):
        return None, f"the probe's answer could not be read: {got}"
    return None, f"the probe failed: {got}"


async def probe_paths(chat: StructuredChat, paths: Sequence[Path] | None = None) -> Abilities:
    """The structured paths ``chat`` offers and lacks (see the module docstring): ``paths``
    (default: every path) probed one at a time, in :data:`ORDER`."""
    wanted = ORDER if paths is None else tuple(p for p in ORDER if p in paths)
    offered: set[Path] = set()
    lacking: dict[str, str] = {}
    for path in wanted:
        request = with_n(PROBE, 2) if path == "chat-n2" else PROBE
        got: StructuredResponse | BaseException
        try:
            got = await chat.structured(request, path)
        except (BackendError, Inexpressible) as exc:
            got = exc
        verdict, seen = decide(path, got, offered)
        if verdict:
            offered.add(path)
        elif verdict is False:
            lacking[ability(path)] = seen
    return Abilities(frozenset(ability(p) for p in offered), lacking)
