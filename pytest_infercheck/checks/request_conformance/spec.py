"""request-conformance's spec facet: its YAML options and its items (one per prompt and
probe, ``r01[stop-token]``).

Options (under ``request-conformance:``): ``target``; ``probes`` (default: every probe of
:data:`~.probes.PROBES`; written, each probe's parameters must be ones the target's engine
takes, else a collection error at its line: :func:`refuse`); ``top_logprobs`` (the ``k`` of
the ``logprobs`` probe); ``streamed`` (also send every probe streamed: each answer, streamed
and not, is judged alike). No thresholds: every finding is a rule of the judge.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from pydantic import Field

from ...backends.params import refusal
from ...request_params import target_backend
from ...specs import TargetCheck
from ...verdict.gate import Gate
from ..framework.harness import Blind, HarnessProfile
from ..framework.plan import ItemPlan
from .probes import PROBE_PARAMS, PROBES, Probe

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite

KEY = "request-conformance"


class RequestConformanceSpec(TargetCheck):
    """Deterministic probes of the request parameters (see :mod:`.probes`)."""

    probes: list[Probe] | None = Field(default=None, min_length=1)
    """The probes run on each prompt (default: every probe; a written probe whose parameters
    the target's engine does not take is refused at its line)."""
    top_logprobs: int = Field(default=3, ge=1, le=20)
    """How many top logprobs a probe that asks for them requests (1 to 20, default 3)."""
    streamed: bool = True
    """Also send each probe streamed (default true)."""

    def probe_list(self) -> tuple[Probe, ...]:
        """The probes written, or every probe."""
        return tuple(self.probes) if self.probes is not None else PROBES


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """One item per prompt and probe (role ``probe``): ``r01[stop-token]``."""
    probes = cast(RequestConformanceSpec, check.spec).probe_list()
    return [ItemPlan(p.id, "probe", p.id, param=probe) for p in suite.prompts for probe in probes]


def refuse(
    loaded: LoadedMatrix, check: CheckSpec, index: int
) -> list[tuple[tuple[str | int, ...], str]]:
    """Each written probe whose parameters the target's engine does not take
    (:func:`~pytest_infercheck.backends.params.refusal`), at its line; a probe left to the
    default list is not exercised on such an engine instead (decided from the matrix, before
    any request)."""
    spec = cast(RequestConformanceSpec, check.spec)
    if spec.probes is None:
        return []
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    kind, chat = target_backend(loaded, target)
    out: list[tuple[tuple[str | int, ...], str]] = []
    for j, probe in enumerate(spec.probes):
        for name in PROBE_PARAMS[probe]:
            why = refusal(target.backend, kind, chat, name)
            if why is not None:
                out.append((("checks", index, KEY, "probes", j), f"probe {probe}: {why}"))
                break
    return out


GATES: tuple[Gate, ...] = ()
"""No thresholds: every finding is a rule of the judge."""

HARNESS = HarnessProfile(
    {
        "request-conformance": {
            "target": "{target}",
            "probes": ["max-tokens", "usage", "logprobs"],
            "top_logprobs": 5,
        }
    },
    blind=(
        *(
            Blind(
                "a prompt is rendered once and every request receives that rendering: a wrong "
                "rendering changes the prompt, not what the engine does with the request's "
                "parameters (its usage counts the ids it was sent; tokenization checks "
                "renderings)",
                fault=fault,
                path="render",
            )
            for fault in ("changed-token", "empty", "truncated")
        ),
        Blind(
            "the probes read logprobs only in the logprobs probe (which fails an answer "
            "without them); the greedy reference and the other probes' answers carry them "
            "unasked, so their absence breaks no parameter",
            fault="no-logprobs",
        ),
    ),
    shapes=("llama-server",),
)
"""The verdict harness's run (``tests/harness``): the probes its toy engine honours (it
applies no stop strings, ``n`` or ``ignore_eos``; its top logprobs are always 5)."""
