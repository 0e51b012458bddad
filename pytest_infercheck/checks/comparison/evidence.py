"""The evidence of a comparison item: everything the gather facet fetched and measured for it,
which the judge (:mod:`.judge`) turns into its record and verdict without any I/O.

- :class:`PromptEvidence`: one prompt x test side: both sides' inputs and generations, the
  distributions compared (:class:`Distributions`: KL_t, same top, delta-p per position,
  and, when the sides were scored teacher-forced on the baseline's continuation, the test
  side's most likely token and both margins at every position), the margins at the first
  divergent token, where the divergence starts, each side's batch and features, and a
  conversation's generated turns;
- :class:`SelfCheckEvidence`: a sweep's baseline generated twice, per prompt;
- :class:`RecordingEvidence`: what ``--infercheck-record`` recorded into a golden.

Each carries its :attr:`~PromptEvidence.measures` (what the gates of :mod:`.spec` read, a
value or :class:`~pytest_infercheck.verdict.measure.Unmeasured` with the reason) and its
:class:`~pytest_infercheck.verdict.conduct.Conduct`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from ...metrics.faults import Fault
from ...metrics.finite import strict_max, strict_mean
from ...metrics.sameness import Sameness, compare_outputs, returned_calls
from ...metrics.text import similarity
from ...verdict.conduct import Conduct
from ...verdict.measure import Finding, MeasureValue, Reading, Unmeasured
from .spec import IDENTICAL_OUTPUTS, KL_MAX, KL_MEAN, SIMILARITY

if TYPE_CHECKING:
    from ...backends import Generation as Generation  # the judge's annotations read it here
    from ...features import FeatureRecord
    from ...golden.record import GoldenRecording
    from ...metrics.forced import ForcedArgmax
    from ...metrics.origin import Origin
    from ...metrics.ties import Margin
    from ...suites import Prompt
    from .inputs import SideInputs

TEACHER_FORCED = "teacher-forced"
TEACHER_FORCED_TOP_K = "teacher-forced-top-k"
TOP_K_LOWER_BOUND = "top-k-lower-bound"
GOLDEN_TOP_K_LOWER_BOUND = "golden-top-k-lower-bound"
TEXT_ONLY = "text"
LOWER_BOUND_METHODS = frozenset({TEACHER_FORCED_TOP_K, TOP_K_LOWER_BOUND, GOLDEN_TOP_K_LOWER_BOUND})
"""The methods whose KL is a lower bound of the full-vocabulary KL (top-k and a tail)."""
NO_ARGMAX_METHODS = frozenset({TOP_K_LOWER_BOUND, TEXT_ONLY})
"""The methods without a teacher-forced argmax at every position (no same-top rate)."""


@dataclass(frozen=True)
class Distributions:
    """What the logprobs of both sides allowed to compare (the method, see
    :mod:`.prompt`), per compared position."""

    method: str
    kl_per_position: list[float]
    same_top: list[bool]
    delta_p: list[float]
    problems: tuple[Fault, ...] = ()
    scoring: str = ""
    """``lockstep`` or ``separate`` for ``teacher-forced``; empty otherwise."""
    note: str = ""
    """Why the method is weaker than teacher forcing where it is."""
    forced: ForcedArgmax | None = None
    """When both sides were scored on the baseline's whole continuation (the teacher-forced
    methods): the test side's most likely token and both margins at every position
    (:mod:`~pytest_infercheck.metrics.forced`); None otherwise (nothing is known of the
    positions after the first divergence)."""


def kl_measures(method: str, note: str, kl: Sequence[float]) -> dict[str, MeasureValue]:
    """``kl_mean`` and ``kl_max`` of a prompt's ``KL_t``: a lower bound for the top-k methods,
    NaN when a position is NaN (a non-finite measure fails its gate), not measured for
    ``text`` (no logprobs to compare: ``method text, the test side returned no top-k
    logprobs``) or without a compared position."""
    if method == TEXT_ONLY:
        why = f"method text, {note}" if note else "method text (no comparable logprobs)"
        return {KL_MEAN: Unmeasured(why), KL_MAX: Unmeasured(why)}
    mean, peak = strict_mean(list(kl)), strict_max(list(kl))
    if mean is None or peak is None:
        why = f"method {method}: no position was compared"
        return {KL_MEAN: Unmeasured(why), KL_MAX: Unmeasured(why)}
    bound = "lower bound" if method in LOWER_BOUND_METHODS else ""
    return {KL_MEAN: Reading(mean, bound), KL_MAX: Reading(peak, bound)}


def prompt_measures(
    method: str, note: str, kl: Sequence[float], sim: float, identical: bool, sameness: str
) -> dict[str, MeasureValue]:
    """What the item gates of a comparison read (:data:`.spec.GATES`): the KL measures
    (:func:`kl_measures`), the text similarity and whether the outputs are the same."""
    return {
        **kl_measures(method, note, kl),
        SIMILARITY: sim,
        IDENTICAL_OUTPUTS: Finding(True) if identical else Finding(False, sameness),
    }


def outputs_verdict(inputs: SideInputs, base: Generation, other: Generation) -> Sameness:
    """Whether the two outputs are the same (:func:`~pytest_infercheck.metrics.sameness.
    compare_outputs`); ids are compared only when both sides received the same prompt ids
    (ids of two tokenizers are not comparable)."""
    shared_ids = inputs.record.shared
    return compare_outputs(
        base.text,
        base.token_ids if shared_ids else None,
        other.text,
        other.token_ids if shared_ids else None,
        base.token_texts,
        other.token_texts,
        returned_calls(base),
        returned_calls(other),
    )


@dataclass(frozen=True)
class TurnEvidence:
    """A turn of a conversation before its final answer: a given turn's text, or a generated
    turn's two outputs on the baseline's history with the inputs both sides received."""

    index: int
    role: str
    kind: Literal["given", "generated"]
    text: str = ""
    inputs: SideInputs | None = None
    base: Generation | None = None
    other: Generation | None = None


@dataclass
class PromptEvidence:
    """One prompt x test side (see the module docstring)."""

    prompt: Prompt
    baseline: str
    """The baseline's target label."""
    test: str
    inputs: SideInputs
    base: Generation
    other: Generation
    distributions: Distributions
    margins: tuple[Margin | None, Margin | None] | None
    """Both sides' margins at the first divergent token (None: no token divergence)."""
    origin: Origin
    base_batch: int | None = None
    test_batch: int | None = None
    batching_note: str = ""
    feature_activity: list[FeatureRecord] = field(default_factory=list)
    turns: list[TurnEvidence] = field(default_factory=list)
    """A conversation's turns before its final answer (empty for a single-turn prompt)."""
    base_labels: list[str] | None = None
    """The baseline's generated tokens as texts for the chart's labels, where the engine
    returned ids only (:func:`.gather_prompt.token_labels`); None: its ``token_texts``."""
    conduct: Conduct = field(default_factory=Conduct)

    @functools.cached_property
    def sameness(self) -> Sameness:
        return outputs_verdict(self.inputs, self.base, self.other)

    @functools.cached_property
    def similarity(self) -> float:
        return similarity(self.base.text, self.other.text)

    @property
    def measures(self) -> dict[str, MeasureValue]:
        d = self.distributions
        verdict = self.sameness
        return prompt_measures(
            d.method, d.note, d.kl_per_position, self.similarity, verdict.same, verdict.describe()
        )


@dataclass(frozen=True)
class Reproduced:
    """A prompt of a sweep's self-check: the baseline's two generations."""

    prompt_id: str
    first: Generation
    second: Generation


@dataclass
class SelfCheckEvidence:
    """A sweep's ``self-check``: every prompt's two baseline generations and how they were
    generated (the second the other way from the first where it can be)."""

    prompts: list[Reproduced]
    generated: str
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> dict[str, MeasureValue]:
        return {}


@dataclass
class RecordingEvidence:
    """What ``--infercheck-record`` recorded (the item's record and the golden writer's
    payloads)."""

    recording: GoldenRecording
    payloads: list[Any]
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> dict[str, MeasureValue]:
        return {}
