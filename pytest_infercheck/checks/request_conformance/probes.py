"""request-conformance's probes, pure: what each asks of the engine, built from the prompt's
greedy reference output, and what a conforming answer is.

The reference ``R`` is the prompt's greedy generation (the kind's ``max_tokens``); ``P`` its
generated tokens' texts (the end-of-sequence token left out), ``T = "".join(P)`` its text.
Every probe is greedy, so a conforming engine repeats ``R`` up to where the probe ends it:

- ``stop-token``: ``stop = P[k]`` (``k = 1`` when ``R`` has two tokens or more, else 0);
  ``stop-tokens``: ``stop = P[k] + P[k+1]`` (``k = 1`` from three tokens on, else 0);
  ``stop-spanning``: the last character of one token and the first of the next (the first
  such pair, preferring a token of two characters or more, so the string starts or ends
  inside a token); a conforming answer's text is ``T[:T.find(stop)]`` and its
  ``finish_reason`` is ``stop``; ``stop-included`` (``include_stop``): the text runs to the end
  of the stop string.
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
from typing import Any, Literal

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
PROBES: tuple[Probe, ...] = (
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
)
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
N_CHOICES = 2
N_TEMPERATURE = 1.0


@dataclass(frozen=True)
class Reference:
    """What a probe is built from: ``R``'s generated token texts (no end-of-sequence), its
    ids (None: the engine gives none), whether it ended on end-of-sequence, and its
    ``max_tokens``."""

    pieces: tuple[str, ...]
    ids: tuple[int, ...] | None
    eos: bool
    max_tokens: int

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


def stop_string(probe: str, ref: Reference) -> str | None:
    """The stop string of a stop probe (see the module docstring); None when ``R`` has too
    few tokens with text."""
    p = ref.pieces
    if probe in ("stop-token", "stop-included"):
        k = 1 if len(p) >= 2 else 0
        return p[k] if p and p[k] else None
    if probe == "stop-tokens":
        if len(p) < 2:
            return None
        k = 1 if len(p) >= 3 else 0
        return p[k] + p[k + 1] or None
    pairs = [i for i in range(len(p) - 1) if p[i] and p[i + 1]]
    inside = [i for i in pairs if len(p[i]) >= 2 or len(p[i + 1]) >= 2]
    if not pairs:
        return None
    i = (inside or pairs)[0]
    return p[i][-1] + p[i + 1][0]


def ask(probe: str, ref: Reference, top_logprobs: int) -> Asked:
    """The request of ``probe`` built from ``R`` (module docstring)."""
    if probe in STOP_PROBES:
        stop = stop_string(probe, ref)
        if stop is None:
            return Asked(
                {},
                f"the greedy output has {len(ref.pieces)} tokens with text: "
                "no stop string of this probe can be taken from it",
            )
        params: dict[str, Any] = {"stop": [stop]}
        if probe == "stop-included":
            params["include_stop"] = True
        return Asked(params)
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
