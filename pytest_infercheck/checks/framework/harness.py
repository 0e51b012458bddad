"""What the property-based verdict harness (``tests/harness``) needs of a kind, declared by
the kind itself in its spec facet (``SpecFacet(harness=...)``), so a new kind gets the
harness through its registry line; and the blind spots several kinds share."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Blind:
    """A fault of the verdict harness's fault space (``tests/harness/faults.py``) that a kind
    cannot see, and why. It matches a fault by its kind (``changed-token``, ``http-5xx``,
    ...), the request path it hit (``detokenize``, ``structured:chat-n2``, ...), whether it
    hit every request of that path (``every``) and the backend kind the fake engine ran as
    (``backend``: ``llama-server``, ``openai``); a field left None matches any."""

    why: str
    fault: str | None = None
    path: str | None = None
    every: bool | None = None
    backend: str | None = None

    def matches(self, fault: str, path: str, every: bool, backend: str) -> bool:
        return (
            (self.fault is None or self.fault == fault)
            and (self.path is None or self.path == path)
            and (self.every is None or self.every == every)
            and (self.backend is None or self.backend == backend)
        )


@dataclass(frozen=True)
class HarnessProfile:
    """What the property-based verdict harness (``tests/harness``) needs to run a kind on its
    fake engines, so that a kind gets the harness through its registry line.

    ``entry`` is a minimal check entry of the kind, with every gate it can judge written; its
    strings may name the harness's targets: ``{target}`` (the target under test,
    ``model@backend``), ``{reference}`` (a second, faithful one), ``{model}``,
    ``{backend}`` and ``{reference_backend}``. ``blind``: the faults it cannot see, each with
    the reason. ``suite``: the prompts to run it on (JSONL records; empty: the harness's
    default suite). ``settings``: the matrix's ``settings:``. ``shapes``: the backend kinds
    the fake engine is run as (``llama-server``: ids, full rows, teacher forcing, a prompt
    cache with an uncached request; ``openai``: text and top-k logprobs only, a cache it
    cannot bypass); ``backend``: extra keys of both ``backends:`` entries (``chat: true``).
    ``unwritten``: per shape, the gates of ``entry`` left out on it, with why (a gate the
    engine of that shape can never measure fails every run as ``not measured``)."""

    entry: Mapping[str, Any]
    blind: tuple[Blind, ...] = ()
    suite: tuple[Mapping[str, Any], ...] = ()
    settings: Mapping[str, Any] = field(default_factory=dict)
    shapes: tuple[str, ...] = ("llama-server",)
    backend: Mapping[str, Any] = field(default_factory=dict)
    unwritten: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def entry_on(self, shape: str) -> dict[str, Any]:
        """``entry`` as written on the fake engine of ``shape`` (its ``unwritten`` gates out)."""
        dropped = self.unwritten.get(shape, {})
        return {key: value for key, value in self.entry.items() if key not in dropped}

    def blind_to(self, fault: str, path: str, every: bool, backend: str) -> str | None:
        """Why the kind cannot see ``fault`` on ``path`` (None: it must see it)."""
        return next((b.why for b in self.blind if b.matches(fault, path, every, backend)), None)


BOTH_SHAPES = ("llama-server", "openai")
"""The fake engine's shapes: ids, full rows and teacher forcing; text and top-k only."""

TIGHT = 1.0e-6
"""A logprob tolerance a faithful engine (bit-identical logprobs) passes."""

RENDERED_ONCE = tuple(
    Blind(
        "a prompt is rendered once and every side (run, path) receives that rendering: a "
        "wrong rendering changes the prompt, not whether the outputs agree on it "
        "(tokenization checks renderings)",
        fault=fault,
        path="render",
    )
    for fault in ("changed-token", "empty", "truncated")
)
"""A kind that renders a prompt once for all its sides cannot see a fault of the rendering."""
TEACHER_FORCED = Blind(
    "on a teacher-forcing engine the comparison's measures come from the full rows of "
    "`score`; the generation's own logprobs are not read",
    fault="no-logprobs",
    backend="llama-server",
)
NO_COLD_REFERENCE = Blind(
    "the kind has no reference that must be cold: it compares outputs whatever the cache served",
    fault="warm-reference",
)
NO_LOGPROB_GATE = Blind(
    "no gate of the kind reads logprobs (it compares tokens and checks each output's own "
    "logprobs for faults): an output without logprobs has no fault to show",
    fault="no-logprobs",
)
SELF_COMPARED = (
    *RENDERED_ONCE,
    NO_COLD_REFERENCE,
    Blind(
        "a fault that changes every generation of the target alike is invisible to a kind "
        "that compares the target with itself",
        fault="changed-token",
        every=True,
    ),
)
"""The blind spots of a kind that compares a target with itself."""
