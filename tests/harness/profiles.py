"""The harness profiles of the kinds that do not carry one yet (a kind written as one
``CheckRun`` class, served through ``checks/framework/legacy.py``, or a ported kind whose
spec facet has no ``harness``). Each belongs in its kind's spec facet
(``SpecFacet(harness=...)``, as tokenization's ``spec.HARNESS``); :func:`profile_of` prefers
the kind's own.

Every entry writes the gates the kind can judge, as strictly as a faithful engine passes
them; ``blind`` lists the faults the kind cannot see, with the reason.
"""

from __future__ import annotations

from pytest_infercheck.checks.framework.harness import (
    BOTH_SHAPES,
    NO_COLD_REFERENCE,
    RENDERED_ONCE,
    TEACHER_FORCED,
    HarnessProfile,
)
from pytest_infercheck.checks.framework.kind import CheckKind

_COMPARED = {
    "max_kl": 0.001,
    "max_kl_position": 0.01,
    "min_similarity": 1.0,
    "max_mean_kl": 0.001,
    "min_same_top": 1.0,
    "flips": {"fail_item_on": "any"},
}
"""Every comparison gate, as tight as an identical engine passes."""
_COMPARISON = (*RENDERED_ONCE, TEACHER_FORCED, NO_COLD_REFERENCE)
BOTH = BOTH_SHAPES

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
}


def profile_of(kind: CheckKind) -> HarnessProfile | None:
    """The kind's own profile (its spec facet's ``harness``), else the one kept here."""
    return kind.spec.harness or PROFILES.get(kind.name)


MISSING = (
    "{kind}: no harness profile: add `harness=HarnessProfile(entry=..., blind=...)` to its "
    "SpecFacet (checks/framework/kind.py: a minimal check entry on {{target}} with its gates "
    "written, and the faults it cannot see with the reason)"
)
