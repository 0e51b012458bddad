"""How an OpenAI-compatible server is asked for logprobs: the request shapes tried at
negotiation (:meth:`~.openai_compat.OpenAICompatBackend.negotiate_logprobs`), their request
fields, and what a negotiation found (:class:`LogprobNegotiation`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INTEGER = "integer"
"""``logprobs: k``: the legacy completions shape."""
BOOL_TOP = "bool+top_logprobs"
"""``logprobs: true, top_logprobs: k``: the chat shape, which some servers take on
``/v1/completions`` too."""
SHAPES = {False: (INTEGER, BOOL_TOP), True: (BOOL_TOP,)}
"""The logprob request shapes tried, in order, by endpoint (``chat``)."""
PROBE_PROMPT = "1"


@dataclass(frozen=True)
class ShapeTried:
    """One logprob request shape tried at negotiation, and what the server did."""

    shape: str
    outcome: str
    """``logprobs`` (it worked), ``HTTP 400: logprobs must be of type bool``, or ``answered
    without logprobs``."""


@dataclass(frozen=True)
class LogprobNegotiation:
    """Which logprob request shape a server's endpoint answers (:data:`INTEGER`,
    :data:`BOOL_TOP`), None when none; the shapes tried, in order."""

    endpoint: str
    shape: str | None
    tried: tuple[ShapeTried, ...] = ()
    declared: str = ""
    """Why nothing was tried: the backend kind is known to return no logprobs."""

    def reason(self) -> str | None:
        """Why there are no logprobs, in a sentence; None when a shape worked."""
        if self.shape is not None:
            return None
        if self.declared:
            return f"no logprobs from /v1/{self.endpoint} ({self.declared})"
        said = "; ".join(f"{t.shape}: {t.outcome}" for t in self.tried) or "not asked"
        return f"no logprobs from /v1/{self.endpoint} ({said})"

    def to_plain(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "shape": self.shape,
            "tried": [{"shape": t.shape, "outcome": t.outcome} for t in self.tried],
            **({"declared": self.declared} if self.declared else {}),
        }


def logprob_fields(shape: str | None, top_k: int) -> dict[str, Any]:
    """The request fields of a logprob ``shape`` (none for None)."""
    if shape == INTEGER:
        return {"logprobs": top_k}
    if shape == BOOL_TOP:
        return {"logprobs": True, "top_logprobs": top_k}
    return {}
