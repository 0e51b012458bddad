"""The harness's one fault space: what can go wrong with one request of a fake engine, and
the Hypothesis strategy that draws it.

A fault hits a request the faithful run made (:class:`Request`: which backend, which path,
which prompt, the how-many-th time), or every request of that backend and path
(``every``). What it does (:data:`FAULT_KINDS`):

- ``changed-token``: one token (a generation's, a tokenization's, a teacher-forced row's
  top two swapped, a structured answer's character or argument) is another;
- ``nan`` / ``inf``: a logprob is NaN / +inf (a generation's chosen logprob and its top-k
  entry; a teacher-forced row);
- ``empty``: nothing comes back (no tokens, no rows, no content and no calls);
- ``truncated``: the output is cut short at a position;
- ``no-logprobs``: a generation that should carry logprobs carries none;
- ``http-4xx`` / ``http-5xx``: the server refuses (400, 404, 422) or fails (500, 502) the
  request, with its message;
- ``warm-reference``: a reference that must be cold is served from the prompt cache: the
  engine reports cached tokens on it (``variant: reported``, its output right), or the cache
  corrupts every hit alike and the reference is one of them (``variant: corrupted-cache``);
- ``duplicated``: the answer to another prompt (the last one the engine answered on that
  backend) comes back;
- ``cut-prompt``: the engine generates from the second half of the prompt ids it was sent
  (and counts those), as a proxy or a context limit that cuts the prompt silently would;
  only a request that sent ids (the backend knows how many) can be measured for it.

Paths (:data:`GENERATION_PATHS` and the others) are the fake engine's request methods; a
structured path is ``structured:<path>`` (``structured:chat-stream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from hypothesis import strategies as st

FAULT_KINDS = (
    "changed-token",
    "nan",
    "inf",
    "empty",
    "truncated",
    "no-logprobs",
    "http-4xx",
    "http-5xx",
    "warm-reference",
    "duplicated",
    "cut-prompt",
)
GENERATION_PATHS = (
    "generate",
    "generate_stream",
    "generate_batch",
    "generate_cached",
    "generate_uncached",
    "via:completions",
    "via:chat",
    "via:messages",
)
ROW_PATHS = ("score", "score_top_k")
ID_PATHS = ("tokenize", "render")
TEXT_PATHS = ("detokenize",)
STATUS = {"http-4xx": (400, 404, 422), "http-5xx": (500, 502)}
VARIANTS = ("reported", "corrupted-cache")


@dataclass(frozen=True)
class Request:
    """One request of a faithful run, as the fake engine logged it."""

    backend: str
    path: str
    key: str
    """What the request was about (a prompt's key, a text's hash)."""
    occurrence: int
    """How many requests of this backend, path and key came before it."""
    positions: int = 0
    """Positions of its answer a fault can hit (tokens with EOS, rows, ids, characters)."""
    content: int = 0
    """Positions without a final EOS (what ``changed-token`` and ``truncated`` hit)."""
    logprobs: bool = False
    """Whether its answer carried logprobs."""
    sent: int = 0
    """Prompt token ids the request sent (0: text or messages)."""
    reference: bool = False
    """A reference that must be cold (an uncached request; on an engine without one, the
    first request of a prompt)."""

    @property
    def structured(self) -> bool:
        return self.path.startswith("structured:")

    @property
    def generation(self) -> bool:
        return self.path in GENERATION_PATHS


@dataclass(frozen=True)
class Fault:
    """One fault of the space (see the module docstring)."""

    kind: str
    request: Request
    every: bool = False
    """Every request of ``request.backend`` and ``request.path``, not only this one."""
    position: int = 0
    status: int | None = None
    variant: str | None = None

    def hits(self, request: Request) -> bool:
        """Whether this fault applies to ``request`` (by path and backend; with ``every``,
        any key and occurrence)."""
        r = self.request
        if (request.backend, request.path) != (r.backend, r.path):
            return False
        return self.every or (request.key, request.occurrence) == (r.key, r.occurrence)

    def describe(self) -> str:
        r = self.request
        where = (
            f"every {r.path} request of {r.backend}"
            if self.every
            else f"{r.path} request #{r.occurrence} of {r.backend} for {r.key}"
        )
        extra = [f"position {self.position}"]
        if self.status is not None:
            extra.append(f"HTTP {self.status}")
        if self.variant is not None:
            extra.append(self.variant)
        return f"{self.kind} on {where} ({', '.join(extra)})"


def applicable(kind: str, request: Request) -> bool:
    """Whether ``kind`` can change what ``request`` answered."""
    if kind in STATUS:
        return request.path != "render" or request.occurrence == 0
    if kind == "warm-reference":
        return request.reference
    if kind in ("nan", "inf"):
        return request.positions > 0 and (request.path in ROW_PATHS or request.logprobs)
    if kind == "no-logprobs":
        return request.generation and request.logprobs
    if kind == "duplicated":
        return (request.generation or request.structured) and request.positions > 0
    if kind == "truncated":
        return request.content >= 2
    if kind == "empty":
        return request.positions > 0
    if kind == "changed-token":
        return request.content > 0
    if kind == "cut-prompt":
        return request.generation and request.sent >= 2
    raise ValueError(f"unknown fault kind {kind!r}")


def targets(kind: str, log: Sequence[Request]) -> list[Request]:
    """The requests of ``log`` that ``kind`` can hit."""
    return [r for r in log if applicable(kind, r)]


@st.composite
def faults(draw: st.DrawFn, kind: str, log: Sequence[Request]) -> Fault:
    """A fault of ``kind`` on one of the requests of ``log`` that it can hit (there must be
    one: see :func:`targets`)."""
    request = draw(st.sampled_from(targets(kind, log)))
    every = draw(st.booleans()) if kind != "warm-reference" else False
    limit = request.content if kind in ("changed-token", "truncated") else request.positions
    low = 1 if kind == "truncated" else 0
    position = draw(st.integers(low, max(low, limit - 1)))
    status = draw(st.sampled_from(STATUS[kind])) if kind in STATUS else None
    variant = draw(st.sampled_from(VARIANTS)) if kind == "warm-reference" else None
    if variant == "corrupted-cache":
        every = True
    return Fault(kind, request, every, position, status, variant)
