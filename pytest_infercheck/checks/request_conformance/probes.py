"""request-conformance's probes, pure: what each asks of the engine, built from the prompt's
greedy reference output, and what a conforming answer is.

The reference ``R`` is the prompt's greedy generation (the kind's ``max_tokens``); ``P`` its
generated tokens' texts (the end-of-sequence token left out), ``T = "".join(P)`` its text.
Every probe is greedy, so a conforming engine repeats ``R`` up to where the probe ends it:

- ``stop-token``: ``stop = P[k]``, the first token from ``k = 1`` on (``k = 0`` for a
  one-token ``R``) whose text first occurs in ``T`` where that token starts;
  ``stop-tokens``: ``stop = P[k] + P[k+1]``, likewise (from ``k = 1`` when ``R`` has three
  tokens or more); ``stop-spanning``: the last character of a token of two characters or
  more and the first of the next, first occurring in ``T`` at that boundary, so the string
  starts inside a token (none such: the probe cannot be built). Streamed, the stop strings
  of ``stop-tokens`` and ``stop-spanning`` arrive split across two chunks (one token a
  chunk). A conforming answer's text is ``T[:T.find(stop)]`` and its ``finish_reason`` is
  ``stop``; ``stop-included`` (``include_stop``): the ``stop-token`` string, the text runs to
  the end of it.
- ``max-tokens``: ``max_tokens = m = max(1, len(P) // 2)``: exactly ``m`` tokens, ``R``'s first
  ``m`` (ids where given, else the text ``"".join(P[:m])``), ``finish_reason: length``.
- ``usage``: ``R``'s ``usage.prompt_tokens`` equals the prompt's token count and
  ``usage.completion_tokens`` the tokens it returned (its ids, the end-of-sequence one
  included, or its logprob entries).
- ``logprobs`` (``top_logprobs`` = k): every generated token carries its logprob and exactly
  k top logprobs (greedy: the chosen token is the first of them).
- ``min-tokens``: where ``R`` ended on end-of-sequence after ``e`` tokens, ``min_tokens = e +
  2`` (``max_tokens = e + 4``): at least ``e + 2`` tokens, none of the first ``e + 2`` the
  end-of-sequence token; ``ignore-eos``: ``max_tokens = e + 3``: exactly ``e + 3`` tokens,
  ``finish_reason: length``.
- ``n``: ``n = 2`` at temperature 1 (seeded): two choices, each with an output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, get_args

Probe = Literal[
    "stop-token",
    "stop-tokens",
    "stop-spanning",
    "stop-included",
    "max-tokens",
    "usage",
    "logprobs",
    "min-tokens",
    "ignore-eos",
    "n",
]
PROBES: tuple[Probe, ...] = get_args(Probe)
PROBE_PARAMS: dict[str, tuple[str, ...]] = {
    "stop-token": ("stop",),
    "stop-tokens": ("stop",),
    "stop-spanning": ("stop",),
    "stop-included": ("stop", "include_stop"),
    "max-tokens": (),
    "usage": (),
    "logprobs": ("logprobs",),
    "min-tokens": ("min_tokens",),
    "ignore-eos": ("ignore_eos",),
    "n": ("n",),
}
"""The request parameters each probe asks (beyond ``max_tokens``)."""
STOP_PROBES = ("stop-token", "stop-tokens", "stop-spanning", "stop-included")
COUNTED = ("max-tokens", "min-tokens", "ignore-eos")
"""The probes built from the greedy output's token count."""
N_CHOICES = 2
N_TEMPERATURE = 1.0


@dataclass(frozen=True)
class Reference:
    """What a probe is built from: ``R``'s generated token texts (no end-of-sequence), its
    ids (None: the engine gives none), whether it ended on end-of-sequence, its
    ``max_tokens``, and how its pieces were had (``token texts``, ``token ids``, or
    ``characters`` where the engine gives neither: the token boundaries are then unknown)."""

    pieces: tuple[str, ...]
    ids: tuple[int, ...] | None
    eos: bool
    max_tokens: int
    boundaries: str = "token ids"

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def returned(self) -> int:
        """Tokens ``R`` returned, the end-of-sequence one included."""
        return len(self.pieces) + (1 if self.eos else 0)


@dataclass(frozen=True)
class Asked:
    """A probe's request: its parameters (beyond the greedy defaults) as written to the
    engine, or why the probe cannot be built from ``R`` (``unbuildable``)."""

    params: dict[str, Any]
    unbuildable: str | None = None


def _offsets(pieces: tuple[str, ...]) -> list[int]:
    """Where each piece starts in their concatenation."""
    out, at = [], 0
    for piece in pieces:
        out.append(at)
        at += len(piece)
    return out


def stop_string(probe: str, ref: Reference) -> str | None:
    """The stop string of a stop probe (see the module docstring); None when ``R`` offers
    none."""
    p, text = ref.pieces, ref.text
    at = _offsets(p)
    if probe in ("stop-token", "stop-included"):
        order = [*range(1, len(p)), 0] if len(p) >= 2 else list(range(len(p)))
        for k in order:
            if p[k] and text.find(p[k]) == at[k]:
                return p[k]
        return None
    if probe == "stop-tokens":
        first = 1 if len(p) >= 3 else 0
        for k in [*range(first, len(p) - 1), *range(first)]:
            stop = p[k] + p[k + 1]
            if p[k] and p[k + 1] and text.find(stop) == at[k]:
                return stop
        return None
    for i in range(len(p) - 1):
        if len(p[i]) >= 2 and p[i + 1]:
            stop = p[i][-1] + p[i + 1][0]
            if text.find(stop) == at[i + 1] - 1:
                return stop
    return None


def ask(probe: str, ref: Reference, top_logprobs: int) -> Asked:
    """The request of ``probe`` built from ``R`` (module docstring)."""
    if probe in STOP_PROBES:
        stop = stop_string(probe, ref)
        if stop is None:
            return Asked(
                {},
                f"the greedy output {ref.text!r} ({len(ref.pieces)} tokens, boundaries from "
                f"{ref.boundaries}) offers no stop string for it"
                + (" (no token of two characters or more)" if probe == "stop-spanning" else ""),
            )
        params: dict[str, Any] = {"stop": [stop]}
        if probe == "stop-included":
            params["include_stop"] = True
        return Asked(params)
    if probe in COUNTED and ref.boundaries == "characters":
        return Asked(
            {},
            "the engine returns neither token texts nor ids: the greedy output's tokens "
            f"cannot be counted, so {probe} cannot be built from it",
        )
    if probe == "max-tokens":
        if not ref.pieces:
            return Asked({}, "the greedy output is empty: max_tokens cannot cut it")
        return Asked({"max_tokens": max(1, len(ref.pieces) // 2)})
    if probe == "usage":
        return Asked({})
    if probe == "logprobs":
        return Asked({"logprobs": top_logprobs})
    if probe in ("min-tokens", "ignore-eos"):
        if not ref.eos:
            return Asked(
                {},
                f"the greedy output does not end on end-of-sequence within "
                f"{ref.max_tokens} tokens: {probe} cannot be shown on it",
            )
        e = ref.returned
        if probe == "min-tokens":
            return Asked({"min_tokens": e + 2, "max_tokens": e + 4})
        return Asked({"ignore_eos": True, "max_tokens": e + 3})
    return Asked({"n": N_CHOICES, "temperature": N_TEMPERATURE, "seed": 0})
