"""The record of a comparison ``prompt`` item (:class:`PromptComparison`): one prompt, two
targets, both generated, their distributions compared, their answers and texts judged. The
gather facet (:mod:`.gather_prompt`) fetches what it holds, the judge (:mod:`.judge`) makes
it.

The comparison method is the strongest both sides allow, and is recorded:

- ``teacher-forced``: the baseline's continuation C (including its EOS) is scored by both
  targets on the same prompt ids; KL_t over the full vocabulary at every position of C.
- ``teacher-forced-top-k``: as ``teacher-forced``, at every position of C, but one side (or
  both) scores only its top k (vLLM's ``prompt_logprobs``,
  :meth:`~pytest_infercheck.backends.base.Backend.score_top_k`): KL_t is the lower bound of
  the tokens both sides know plus one tail bucket (:func:`~pytest_infercheck.metrics.kl.
  topk_pair_stats`, :func:`~pytest_infercheck.metrics.topk_full.full_vs_topk_stats`);
  same-top and delta-p are exact.
- ``top-k-lower-bound``: free-running top-k logprobs of both generations, only up to the
  first divergent token (later positions condition on different prefixes); a lower bound.
  The first divergence is found by token id, else by token text (a side's own, or each
  step's token read from its top-k: the entry whose logprob is the chosen one, checked
  against the text), else by re-tokenising both outputs with the served folder's
  tokenizer; when none of these can locate it, the comparison is ``text`` and says why.
- ``golden-top-k-lower-bound``: the baseline is a golden file (no live model, so it cannot
  score): its continuation is scored teacher-forced on the test side (full rows, or its top
  k) and compared at every position with the golden's recorded top-k (tail bucket, a lower
  bound).
- ``text``: no usable logprobs; text similarity, first divergence and answers only; the
  record's :attr:`~PromptComparison.method_note` says why.

Fail closed: the scoring's own findings (a logprob row with a NaN or ``+inf``, a full row
that does not normalise, a top-k list whose mass exceeds 1, a NaN or infinite ``KL_t``) are
kept on the record (:attr:`PromptComparison.problems`); :mod:`.verdicts` makes each one a
violation of its own.

Past the first divergent token: with a teacher-forced method both sides were scored at every
position of the baseline's continuation, so the record says whether the test side's most
likely token disagrees with the baseline's at a later position, and how decisively
(:attr:`PromptComparison.judged_past`, :attr:`~PromptComparison.later_labels`): what lets
``fail_on: decisive`` waive a near-tie only once the rest of the output was judged.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ...features import FeatureRecord
from ...metrics.answers import FlipKind
from ...metrics.degenerate import DegenerateScan
from ...metrics.faults import Faults
from ...metrics.finite import strict_max, strict_mean
from ...metrics.origin import Stage
from ...records import OMIT_WHEN_EMPTY, Measured
from .evidence import (
    GOLDEN_TOP_K_LOWER_BOUND,
    LOWER_BOUND_METHODS,
    TEACHER_FORCED,
    TEACHER_FORCED_TOP_K,
    TEXT_ONLY,
    TOP_K_LOWER_BOUND,
)
from .inputs import PromptInputs
from .spec import SELF_CHECK
from .turns import TurnComparison

__all__ = [
    "GOLDEN_TOP_K_LOWER_BOUND",
    "IDENTICAL",
    "LOWER_BOUND_METHODS",
    "SELF_CHECK",
    "TEACHER_FORCED",
    "TEACHER_FORCED_TOP_K",
    "TEXT_ONLY",
    "TOP_K_LOWER_BOUND",
    "Disagreement",
    "PromptComparison",
    "SelfCheckRecord",
]


@dataclass(frozen=True)
class SelfCheckRecord:
    """The record of a sweep's ``self-check`` item (the baseline generated twice)."""

    problems: list[str]
    """One line per prompt whose two baseline generations differ (``r017: token ids differ
    from token 3``, ``r017: same tokens, logprobs drift by 0.002``); empty: reproduced."""
    failed: list[str]
    """The ids of those prompts, in the suite's order: the failed items of the cliff's first
    level (:func:`self_check_level`), so that the aggregate reads them from this record
    (in a sharded run it is in one shard only)."""
    generated: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """How the two runs were generated (``batched, then one at a time``): the second the
    other way when it can be, so the self-check also shows that batching changed nothing."""


IDENTICAL = "identical"
"""The sameness verdict of two outputs that are the same
(:meth:`~pytest_infercheck.metrics.sameness.Sameness.describe`), as a record holds it."""


@dataclass(frozen=True)
class Disagreement:
    """A position of the baseline's continuation where the test side, fed the same prefix,
    prefers another token (:mod:`~pytest_infercheck.metrics.forced`)."""

    position: int
    """Its index (tokens of the baseline's continuation, from 0)."""
    base_token: int
    """The baseline's token there."""
    test_token: int
    """The test side's most likely token there."""
    margins: list[float]
    """The baseline's ``log p_base(base) - log p_base(test)`` and the test side's ``log
    p_test(test) - log p_test(base)``, in nats."""
    margins_exact: bool
    """False when the baseline's margin is a lower bound (its top-k lacked the test's
    token)."""
    label: str
    """``near-tie``, ``decisive`` or ``unknown`` at the check's ``tie_margin``
    (:func:`~pytest_infercheck.metrics.ties.divergence_label`)."""


@dataclass(frozen=True)
class PromptComparison:
    """The record of a comparison ``prompt`` item: one prompt, one baseline x test side.

    Every field is a key of the item's ``data`` in the reports and the JSON results; the last
    four (:attr:`kl_mean`, :attr:`kl_max`, :attr:`same_top_rate`, :attr:`is_flip`) are
    derived from the others when the record is made (or read back), so they are never out of
    step with them. Token positions count from the first token of the baseline's continuation.
    """

    prompt_id: str
    """The prompt's stable id in its suite (``r017``)."""
    prompt_text: str
    """The prompt as the suite states it (before any chat template)."""
    baseline: str
    """The baseline's target label (``bf16@local``, ``golden:adder-v1``)."""
    test: str
    """The test side's target label (``q4@local``)."""
    method: str
    """How the distributions were compared: ``teacher-forced``, ``teacher-forced-top-k``,
    ``top-k-lower-bound``, ``golden-top-k-lower-bound`` or ``text`` (see the module
    docstring)."""
    base_text: str
    """The baseline's output (its answer, without a reasoning chain returned apart)."""
    test_text: str
    """The test side's output."""
    base_ids: list[int] | None
    """The baseline's generated token ids; None when the backend does not return them."""
    test_ids: list[int] | None
    """The test side's generated token ids; None when the backend does not return them."""
    base_finish: str
    """Why the baseline stopped (``stop``, ``length``)."""
    test_finish: str
    """Why the test side stopped."""
    first_divergence: int | None
    """The first differing token (by id where both sides share the token ids, else by token
    text); None when the outputs do not differ token by token."""
    similarity: float
    """Text similarity of the two outputs, 0 (nothing in common) to 1 (equal)."""
    severity: str
    """How far the outputs differ (``identical``, ``minor``, ..., ``severe``)."""
    kl_per_position: list[Measured] = field(default_factory=list)
    """KL_t(baseline || test) in nats at each compared position (a lower bound for the
    ``top-k`` methods); empty for ``text``."""
    same_top: list[bool] = field(default_factory=list)
    """At each position: do both sides' most likely tokens agree (teacher-forced methods)."""
    delta_p: list[Measured] = field(default_factory=list)
    """At each position: p_test - p_base of the baseline's chosen token (teacher-forced
    methods)."""
    answer_kind: str | None = None
    """The prompt's answer kind (``number``, ``choice``, ...); None: answers not judged."""
    reference: str | None = None
    """The suite's reference answer, if it has one."""
    base_answer: str | None = None
    """The answer extracted from the baseline's output (None: none found)."""
    test_answer: str | None = None
    """The answer extracted from the test side's output (None: none found)."""
    flip: str = "unchanged"
    """The answer flip (:class:`~pytest_infercheck.metrics.answers.FlipKind`):
    ``unchanged``, ``correct_to_wrong``, ``wrong_to_correct``, ..."""
    base_tokens: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Each token of the baseline's continuation as text, where its engine returned them
    (:attr:`~pytest_infercheck.backends.base.Generation.token_texts`); empty (absent from
    the JSON) otherwise. The KL chart labels its positions with them."""
    base_correct: bool | None = None
    """Whether the baseline's answer equals the reference (None: no reference, or a record
    written before it was kept): with :attr:`flip`, the prompt's cell of the flip matrix
    (:func:`~.aggregate.answer_matrix`)."""
    sameness: str = ""
    """The sameness verdict on the two outputs (ids and text,
    :func:`~pytest_infercheck.metrics.sameness.compare_outputs`), e.g. ``identical`` or
    ``same token ids, text differs from character 3 (detokenization difference)``."""
    templated: bool = False
    """Whether the prompt went through the baseline's chat template."""
    base_reasoning_chars: int = 0
    """Length of a reasoning chain the baseline returned apart from its answer (compared:
    answers)."""
    test_reasoning_chars: int = 0
    """Length of a reasoning chain the test side returned apart from its answer."""
    base_tool_calls: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """The calls the baseline's server returned apart from its text (``Generation.
    tool_calls``), readable (:func:`~pytest_infercheck.tools.describe_calls`); empty (absent
    from the JSON) when it returned none: an engine that returns raw text leaves its calls in
    ``base_text``."""
    test_tool_calls: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """The calls the test side's server returned apart from its text, readable."""
    problems: Faults = field(default_factory=list)
    """What the scoring found unusable, fail closed: logprob rows holding a NaN or ``+inf``
    (``non-finite test logprobs at position 3 (NaN)``), full rows whose logsumexp is not
    within the tolerance of 0, top-k lists whose mass exceeds 1, NaN or infinite ``KL_t``.
    Each is a violation of its own (:func:`~.verdicts.item_faults`). In JSON: a list of
    faults (:class:`~pytest_infercheck.metrics.faults.Fault`); the objects with a ``type``
    (``non-finite``, ``not-normalised``, ``empty-generation``) earlier versions wrote are
    read back too (:func:`~pytest_infercheck.metrics.faults.fault_from_plain`)."""
    faults: Faults = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """What each side's own generation carries that cannot be right
    (:func:`~pytest_infercheck.metrics.consistency.generation_faults`): a NaN or ``+inf``
    chosen or top-k logprob, a chosen logprob that does not match its token's top-k entry.
    Each is a violation of its own; absent from the JSON when there are none."""
    degenerate: DegenerateScan = field(default_factory=DegenerateScan)
    """Both sides' degenerate findings (:func:`~pytest_infercheck.metrics.consistency.
    read_generation`, with the faults): counted, a violation only under
    ``fail_on_degenerate: true``."""
    divergence_origin: Stage | None = None
    """Where the divergence starts (:mod:`~pytest_infercheck.metrics.origin`), in order:
    ``template``, ``special-tokens``, ``prompt-ids``, ``generated-tokens``,
    ``detokenization``; ``undetermined`` when the outputs differ and no observed stage shows
    where; None when the outputs are the same."""
    origin_detail: str = ""
    """The stage's evidence in a sentence (``the tokens agree (the text is the baseline's
    tokens decoded, the first token's leading space dropped, ...); texts differ from
    character 0``); also says when the outputs are the same although the prompts differ."""
    prompt_inputs: PromptInputs | None = None
    """Which prompt ids each side received and why (:mod:`.inputs`)."""
    base_batch: int | None = None
    """How many prompts shared the forward passes that generated the baseline's output (1:
    alone); None: not known (an HTTP engine schedules its own batches)."""
    test_batch: int | None = None
    """How many prompts shared the forward passes that generated the test side's output."""
    scoring: str = ""
    """For ``teacher-forced``: ``lockstep`` (the statistics accumulated while the test side
    was fed the baseline's tokens as they came, :mod:`~pytest_infercheck.backends.
    mlx_lockstep`) or ``separate`` (both sides scored on the baseline's continuation
    afterwards); empty for the other methods."""
    method_note: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """Why the method is weaker than teacher forcing where it is (``text``: which side has
    no logprobs, keys them otherwise, or why the first divergent token cannot be located;
    ``top-k-lower-bound``: how the first divergence was found); absent from the JSON when
    empty."""
    batching_note: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """Why the sides were generated one at a time although they could be batched
    (``batching: false``, ``--infercheck-no-batching``, a failed batching probe); absent
    from the JSON when empty."""
    margins: list[float | None] | None = None
    """At the first divergent token (:mod:`~pytest_infercheck.metrics.ties`): the baseline's
    margin ``log p_base(own) - log p_base(test's token)`` and the test side's ``log
    p_test(own) - log p_test(baseline's token)``, in nats, each under its own distribution;
    an element is None where that side has no logprobs at the divergence; None when the
    outputs do not diverge token by token."""
    margins_exact: bool = True
    """False when a margin is a lower bound (the other token was outside that side's
    top-k: ``log p(own) - min(top-k)``)."""
    feature_activity: list[FeatureRecord] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
    """Per side whose backend turns a feature on (speculative decoding, a quantized KV
    cache: :mod:`~pytest_infercheck.features`): its features, what its engine reported of
    them on this prompt (drafted and accepted tokens, cache hits, KV bits in use) and those
    that never engaged (``unexercised``); absent from the JSON when no side has a
    feature."""
    noise_floor: float | None = None
    """The largest |delta logprob| of the chosen tokens over the positions where both sides
    agree (before the first divergence; every position when the token ids are equal): the
    engines' own numeric noise; None without both sides' chosen logprobs."""
    turns: list[TurnComparison] = field(default_factory=list)
    """Of a conversation (a ``messages`` prompt): every turn, given and generated, each
    generated turn compared on the baseline's history, the final answer last
    (:mod:`.turns`); empty for a single-turn prompt."""
    first_divergent_turn: int | None = None
    """Of a conversation: the index of the first turn whose two outputs differ
    (:func:`.turns.first_divergent_turn`); None when none does, or for a single-turn
    prompt."""
    divergence_label: str | None = None
    """``near-tie`` (every margin exact and within the check's ``tie_margin``), ``decisive``
    (a margin above it), ``unknown`` (no logprobs at the divergence, a bound within it, a
    non-finite margin); None when the outputs do not diverge token by token."""
    judged_past: bool | None = None
    """Whether the positions after the first divergent token were judged: True when both
    sides were scored teacher-forced on the baseline's whole continuation (its test side's
    most likely token known at every later position, :attr:`later_labels`), False when the
    comparison stops at the divergence (``top-k-lower-bound``, ``text``); None when the
    outputs do not diverge token by token."""
    later_labels: dict[str, int] = field(default_factory=dict, metadata=OMIT_WHEN_EMPTY)
    """Of the positions after the first divergent token where the test side's most likely
    token is not the baseline's (teacher-forced): how many by label
    (``{near-tie: 1, decisive: 2, unknown: 0}``); absent from the JSON when none or not
    judged."""
    later_first: Disagreement | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    """The first of those that is not a near-tie (decisive or unknown), if any."""
    bucket: str = field(default="", metadata=OMIT_WHEN_EMPTY)
    """The prompt's bucket in a generated suite (``context-ladder``: its length, ``2x``),
    by which the aggregate reports KL apart (:func:`~.buckets.bucket_stats`); absent from
    the JSON when empty."""
    kl_mean: float | None = field(init=False)
    """Derived: mean of :attr:`kl_per_position`, NaN when any position is NaN (None without
    positions)."""
    kl_max: float | None = field(init=False)
    """Derived: largest of :attr:`kl_per_position`, NaN when any position is NaN, wherever
    it is (None without positions)."""
    same_top_rate: float | None = field(init=False)
    """Derived: share of :attr:`same_top` positions that agree (None without positions)."""
    is_flip: bool = field(init=False)
    """Derived: whether :attr:`flip` counts as a flip."""

    def __post_init__(self) -> None:
        kl, same_top = self.kl_per_position, self.same_top
        derived = {
            "kl_mean": strict_mean(kl),
            "kl_max": strict_max(kl),
            "same_top_rate": sum(same_top) / len(same_top) if same_top else None,
            "is_flip": FlipKind(self.flip).is_flip,
        }
        for name, value in derived.items():
            object.__setattr__(self, name, value)

    @property
    def identical(self) -> bool:
        """Whether the two outputs are the same: the sameness verdict of the comparison
        (:func:`outputs_verdict`, recorded in :attr:`sameness`); False for a record without
        one (an older file)."""
        return self.sameness == IDENTICAL

    @property
    def unexercised(self) -> list[str]:
        """Every side's features that never engaged on this prompt, named by side."""
        return [
            f"{r.side} {r.target}: {why}" for r in self.feature_activity for why in r.unexercised
        ]

    def to_plain(self) -> dict[str, Any]:
        """Every field (:func:`plain_data` makes them plain), but the empty ones marked
        ``OMIT_WHEN_EMPTY`` and a single-turn prompt's ``first_divergent_turn``."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        omitted = [f.name for f in fields(self) if f.metadata.get("omit_when_empty")]
        for name in ("turns", *omitted):
            if not data[name]:
                del data[name]  # OMIT_WHEN_EMPTY, as for a record without a to_plain
        if not self.turns:
            del data["first_divergent_turn"]  # a single-turn prompt has no turns
        return data
