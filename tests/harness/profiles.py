"""The harness profiles of the kinds that do not carry one yet (a kind written as one
``CheckRun`` class, served through ``checks/framework/legacy.py``, or a ported kind whose
spec facet has no ``harness``). Each belongs in its kind's spec facet
(``SpecFacet(harness=...)``, as tokenization's ``spec.HARNESS``); :func:`profile_of` prefers
the kind's own.

Every entry writes the gates the kind can judge, as strictly as a faithful engine passes
them; ``blind`` lists the faults the kind cannot see, with the reason.
"""

from __future__ import annotations

from pytest_infercheck.checks.framework.kind import Blind, CheckKind, HarnessProfile

from .structured_suite import STRUCTURED_SUITE

BOTH = ("llama-server", "openai")
"""The fake engine's shapes: ids, full rows and teacher forcing; text and top-k only."""

TIGHT = 1.0e-6
"""A logprob tolerance a faithful engine (bit-identical logprobs) passes."""

_COMPARED = {
    "max_kl": 0.001,
    "max_kl_position": 0.01,
    "min_similarity": 1.0,
    "max_mean_kl": 0.001,
    "min_same_top": 1.0,
    "flips": {"fail_item_on": "any"},
}
"""Every comparison gate, as tight as an identical engine passes."""

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
_COMPARISON = (*RENDERED_ONCE, TEACHER_FORCED, NO_COLD_REFERENCE)
_SELF = (
    *RENDERED_ONCE,
    NO_COLD_REFERENCE,
    Blind(
        "a fault that changes every generation of the target alike is invisible to a kind "
        "that compares the target with itself",
        fault="changed-token",
        every=True,
    ),
)

PROFILES: dict[str, HarnessProfile] = {
    "compare": HarnessProfile(
        {"compare": {"baseline": "{reference}", "test": "{target}"}, **_COMPARED},
        blind=_COMPARISON,
        shapes=BOTH,
    ),
    "sweep": HarnessProfile(
        {"sweep": {"baseline": "{reference}", "models": ["{target}"]}, **_COMPARED},
        blind=_COMPARISON,
        shapes=BOTH,
    ),
    "diff": HarnessProfile(
        {
            "diff": {"model": "{model}", "backends": ["{reference_backend}", "{backend}"]},
            "expect": "identical",
            **_COMPARED,
        },
        blind=_COMPARISON,
        shapes=BOTH,
    ),
    "determinism": HarnessProfile(
        {
            "determinism": {"target": "{target}", "runs": 3},
            "max_logprob_drift": TIGHT,
            "min_determinism": 1.0,
            "max_error_rate": 0.0,
        },
        blind=_SELF,
        shapes=BOTH,
    ),
    "batch-invariance": HarnessProfile(
        {
            "batch-invariance": {"target": "{target}", "trials": 1, "batch_size": 3},
            "logprob_tolerance": TIGHT,
        },
        blind=_SELF,
        shapes=BOTH,
    ),
    "stress": HarnessProfile(
        {
            "stress": {"target": "{target}", "levels": [2], "repeats": 1},
            "min_consistency": 1.0,
            "max_error_rate": 0.0,
        },
        blind=(*_SELF, NO_LOGPROB_GATE),
        shapes=BOTH,
    ),
    "stream-parity": HarnessProfile(
        {"stream-parity": {"target": "{target}"}, "logprob_tolerance": TIGHT},
        blind=(*RENDERED_ONCE, NO_COLD_REFERENCE),
        shapes=BOTH,
    ),
    "endpoint-parity": HarnessProfile(
        {
            "endpoint-parity": {
                "target": "{target}",
                "endpoints": ["completions", "chat", "messages"],
            },
            "min_similarity": 1.0,
            "flips": {"fail_item_on": "any"},
        },
        blind=(NO_COLD_REFERENCE,),
        shapes=BOTH,
    ),
    "cache-pollution": HarnessProfile(
        {"cache-pollution": {"target": "{target}", "hostile": ["special-tokens", "invalid-utf8"]}},
        blind=(*_SELF, NO_LOGPROB_GATE),
        shapes=BOTH,
    ),
    "cache-parity": HarnessProfile(
        {
            "cache-parity": {
                "target": "{target}",
                "scenarios": ["shared-prefix", "exact-repeat", "multi-turn", "concurrent"],
            },
            "logprob_tolerance": TIGHT,
            "require_hits": True,
        },
        blind=(
            *RENDERED_ONCE,
            Blind(
                "an engine with no uncached request serves the reference through the same "
                "cache as the scenarios: a fault that changes every generation alike changes "
                "the reference too",
                fault="changed-token",
                every=True,
                backend="openai",
            ),
        ),
        shapes=BOTH,
    ),
    "structured-parity": HarnessProfile(
        {"structured-parity": {"targets": ["{reference}", "{target}"]}},
        blind=(*RENDERED_ONCE, NO_COLD_REFERENCE),
        suite=STRUCTURED_SUITE,
        shapes=BOTH,
    ),
}


def profile_of(kind: CheckKind) -> HarnessProfile | None:
    """The kind's own profile (its spec facet's ``harness``), else the one kept here."""
    return kind.spec.harness or PROFILES.get(kind.name)


MISSING = (
    "{kind}: no harness profile: add `harness=HarnessProfile(entry=..., blind=...)` to its "
    "SpecFacet (checks/framework/kind.py: a minimal check entry on {{target}} with its gates "
    "written, and the faults it cannot see with the reason)"
)
