"""One prompt, two targets: generate both, score teacher-forced, compare answers and text.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

from pydantic import BeforeValidator

from ...backends import Capabilities, Generation
from ...features import FeatureRecord, feature_record
from ...golden import golden_scorable
from ...metrics.answers import FlipKind, judge_answers
from ...metrics.consistency import read_generation, reported_logprobs
from ...metrics.degenerate import DegenerateScan
from ...metrics.finite import (
    Problem,
    check_logprob_rows,
    check_topk_rows,
    check_values,
    problem_from_dict,
    strict_max,
    strict_mean,
)
from ...metrics.kl import (
    PositionStats,
    position_stats,
    topk_kl_lower_bound_positions,
    topk_pair_stats,
)
from ...metrics.origin import Origin, PromptSide, Stage, locate_origin, nfc_probe_texts
from ...metrics.sameness import Sameness, compare_outputs, returned_calls
from ...metrics.text import first_divergence, severity, similarity
from ...metrics.ties import (
    DEFAULT_TIE_MARGIN,
    Margin,
    divergence_label,
    full_row_margin,
    reported_noise_floor,
    top_k_margin,
)
from ...metrics.tokenization import LEADING, WINDOW
from ...metrics.topk_full import full_vs_topk_stats, topk_vs_full_stats
from ...records import OMIT_WHEN_EMPTY, Measured
from ...tools import describe_calls
from .inputs import PromptInputs, SideInputs, decide_inputs
from .retokenize import judged_ids, retokenized_divergence, text_side_verdict
from .turns import TurnComparison

if TYPE_CHECKING:
    from ...backends import GenerationParams
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt

TEACHER_FORCED = "teacher-forced"
TEACHER_FORCED_TOP_K = "teacher-forced-top-k"
TOP_K_LOWER_BOUND = "top-k-lower-bound"
GOLDEN_TOP_K_LOWER_BOUND = "golden-top-k-lower-bound"
TEXT_ONLY = "text"
LOWER_BOUND_METHODS = frozenset({TEACHER_FORCED_TOP_K, TOP_K_LOWER_BOUND, GOLDEN_TOP_K_LOWER_BOUND})
"""The methods whose KL is a lower bound of the full-vocabulary KL (top-k and a tail)."""
IDENTICAL = "identical"
"""The sameness verdict of two outputs that are the same
(:meth:`~pytest_infercheck.metrics.sameness.Sameness.describe`), as a record holds it."""


def _problems_from_plain(value: Any) -> Any:
    """Problems read back from their plain form (``Problem.to_dict()``, then JSON): a
    not-normalised row's ``-inf`` logsumexp (an all ``-inf`` row) comes back from ``null``."""
    if not isinstance(value, list):
        return value
    out: list[Any] = []
    for doc in value:
        if not isinstance(doc, Mapping):
            out.append(doc)
            continue
        if doc.get("type") == "not-normalised" and isinstance(doc.get("logsumexp"), list):
            doc = {**doc, "logsumexp": [-math.inf if v is None else v for v in doc["logsumexp"]]}
        try:
            out.append(problem_from_dict(doc))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a problem: {doc!r} ({exc})") from exc
    return out


Problems = Annotated[list[Problem], BeforeValidator(_problems_from_plain)]
"""Fail-closed findings (:mod:`~pytest_infercheck.metrics.finite`), stored in JSON as
``Problem.to_dict()`` (with their ``type``)."""


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
    problems: Problems = field(default_factory=list)
    """What the scoring found unusable, fail closed: logprob rows holding a NaN or ``+inf``
    (``non-finite test logprobs at position 3 (NaN)``), full rows whose logsumexp is not
    within the tolerance of 0, top-k lists whose mass exceeds 1, NaN or infinite ``KL_t``.
    Each is a violation of its own (:func:`~.verdicts.item_problems`). In JSON: a list of
    objects with a ``type`` (``non-finite``, ``not-normalised``) and the positions."""
    faults: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)
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
        """Every field, the problems with their ``type`` (:func:`plain_data` makes the rest
        plain)."""
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["problems"] = [p.to_dict() for p in self.problems]
        omitted = [f.name for f in fields(self) if f.metadata.get("omit_when_empty")]
        for name in ("turns", *omitted):
            if not data[name]:
                del data[name]  # OMIT_WHEN_EMPTY, as for a record without a to_plain
        if not self.turns:
            del data["first_divergent_turn"]  # a single-turn prompt has no turns
        return data


class _Distributions(NamedTuple):
    """What the logprobs of both sides allow to compare (see the module docstring)."""

    method: str
    kl_per_position: list[float]
    same_top: list[bool]
    delta_p: list[float]
    problems: tuple[Problem, ...] = ()
    scoring: str = ""
    note: str = ""


class _Answers(NamedTuple):
    """The answers of both sides, judged against the prompt's reference."""

    answer_kind: str | None = None
    reference: str | None = None
    base_answer: str | None = None
    test_answer: str | None = None
    flip: str = "unchanged"


def compare_prompt(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt: Prompt,
    params: GenerationParams,
    *,
    thinking: bool = False,
    base_run: int = 0,
    test_run: int = 0,
    inputs: SideInputs | None = None,
    batching_note: str = "",
    tie_margin: float = DEFAULT_TIE_MARGIN,
) -> PromptComparison:
    """Compare ``test`` against ``baseline`` on ``prompt`` (see the module docstring);
    ``inputs``: the sides' inputs when already decided (:func:`.inputs.decide_inputs`);
    ``batching_note``: why in-process sides were generated one at a time, if they were;
    ``tie_margin``: the check's, which labels the first divergence."""
    if inputs is None:
        inputs = decide_inputs(cache, baseline, test, prompt, thinking)
    rendered, test_input = inputs.base, inputs.test
    shared_ids = inputs.record.shared
    base = cache.generate(baseline, rendered, params, run=base_run)
    other = cache.generate(test, test_input, params, run=test_run)

    verdict = outputs_verdict(inputs, base, other)
    divergence = verdict.first_divergence if verdict.divergence_unit == "token" else None
    sim = similarity(base.text, other.text)
    dists = _distributions(
        cache, baseline, test, rendered.token_ids, base, other, shared_ids, verdict
    )
    answers = _answers(prompt, base, other)
    origin = _origin(cache, baseline, test, inputs, base, other, verdict)
    margins = _margins(
        cache, baseline, test, rendered.token_ids if shared_ids else None, base, other, divergence
    )
    readings = [
        read_generation(f"the {where} output", g)
        for where, g in (("baseline", base), ("test", other))
    ]
    return PromptComparison(
        prompt_id=prompt.id,
        prompt_text=prompt.text,
        baseline=baseline.label,
        test=test.label,
        method=dists.method,
        base_text=base.text,
        test_text=other.text,
        base_ids=base.token_ids,
        test_ids=other.token_ids,
        base_finish=base.finish_reason,
        test_finish=other.finish_reason,
        first_divergence=divergence,
        similarity=sim,
        severity=severity(verdict.same, sim).value,
        kl_per_position=dists.kl_per_position,
        same_top=dists.same_top,
        delta_p=dists.delta_p,
        answer_kind=answers.answer_kind,
        reference=answers.reference,
        base_answer=answers.base_answer,
        test_answer=answers.test_answer,
        flip=answers.flip,
        sameness=verdict.describe(),
        templated=rendered.templated,
        base_reasoning_chars=len(base.reasoning or ""),
        test_reasoning_chars=len(other.reasoning or ""),
        base_tool_calls=describe_calls(base.tool_calls) if base.tool_calls else "",
        test_tool_calls=describe_calls(other.tool_calls) if other.tool_calls else "",
        problems=list(dists.problems),
        faults=[f.text for reading in readings for f in reading.faults],
        degenerate=DegenerateScan.of([reading.degenerate for reading in readings]),
        divergence_origin=origin.stage,
        origin_detail=origin.detail,
        prompt_inputs=inputs.record,
        base_batch=_batch_size(baseline, base),
        test_batch=_batch_size(test, other),
        scoring=dists.scoring,
        method_note=dists.note,
        batching_note=batching_note,
        margins=None if margins is None else [None if m is None else m.value for m in margins],
        margins_exact=margins is None or all(m is None or m.exact for m in margins),
        noise_floor=reported_noise_floor(
            reported_logprobs(base.chosen_logprobs, base.top_logprobs),
            reported_logprobs(other.chosen_logprobs, other.top_logprobs),
            _agreeing(verdict, base, other),
        ),
        divergence_label=divergence_label(divergence is not None, margins or [], tie_margin),
        feature_activity=[
            feature_record(side, target.label, target.backend.features, generation.activity)
            for side, target, generation in (("baseline", baseline, base), ("test", test, other))
            if target.backend.features
        ],
    )


def _agreeing(verdict: Sameness, base: Generation, other: Generation) -> int:
    """How many leading positions both sides chose the same token after the same prefix:
    up to the first divergent token, all of them when the token ids are equal, else none
    known."""
    if verdict.divergence_unit == "token" and verdict.first_divergence is not None:
        return verdict.first_divergence
    if base.token_ids is not None and base.token_ids == other.token_ids:
        return len(base.token_ids)
    return 0


def _margins(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
    other: Generation,
    at: int | None,
) -> tuple[Margin | None, Margin | None] | None:
    """Each side's margin at the first divergent token ``at`` (None: no divergence), under
    its own distribution there (both sides saw the same prefix), from the first of: the
    generation's full rows; its top-k when it holds the other token (exact); the side's
    teacher-forced full rows of the baseline's continuation (same prefix up to ``at``); its
    top-k's lower bound. Keys are token ids where both sides received the same prompt ids
    (``prompt_ids`` given), else token texts for a side whose top-k is keyed by text."""
    if at is None:
        return None

    def side(target: ResolvedTarget, own: Generation, versus: Generation) -> Margin | None:
        by_id = prompt_ids is not None
        keys = (own.token_ids, versus.token_ids) if by_id else (own.token_texts, versus.token_texts)
        if keys[0] is None or keys[1] is None or at >= min(len(keys[0]), len(keys[1])):
            return None
        mine, theirs = keys[0][at], keys[1][at]
        if by_id and own.full_logprobs is not None and at < len(own.full_logprobs):
            return full_row_margin(own.full_logprobs[at], int(mine), int(theirs))
        top = None
        if (
            own.top_logprobs
            and at < len(own.top_logprobs)
            and own.top_keys == ("id" if by_id else "text")
        ):
            top = own.top_logprobs[at]
        chosen = (
            own.chosen_logprobs[at]
            if own.chosen_logprobs and at < len(own.chosen_logprobs)
            else None
        )
        from_top = top_k_margin(top, mine, theirs, own_logprob=chosen)
        if from_top is not None and from_top.exact:
            return from_top
        if (
            by_id
            and prompt_ids is not None
            and target.backend.capabilities.teacher_forcing
            and base.token_ids
        ):
            rows = cache.score(target, list(prompt_ids), base.token_ids)
            return full_row_margin(rows[at], int(mine), int(theirs))
        return from_top

    return side(baseline, base, other), side(test, other, base)


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


def _batch_size(target: ResolvedTarget, generation: Generation) -> int | None:
    """How many prompts shared the generation's forward passes (``batched``, when the engine
    batched it; else an in-process engine generated it alone); None for a concurrent (HTTP)
    engine."""
    if generation.batched > 1:
        return generation.batched
    return 1 if target.backend.concurrency <= 1 else None


def _origin(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
    verdict: Sameness,
) -> Origin:
    """Where the divergence starts (:func:`~pytest_infercheck.metrics.origin.locate_origin`).
    Generated ids are compared when both sides have them and share a vocabulary (one
    prompt, or equal fingerprints); a text-only test side is judged by re-tokenization
    (:mod:`.retokenize`, which checks that its tokenizer agrees with the baseline's ids); ids
    are named by the baseline's tokenizer (the test's for ids only it has). When the outputs
    differ and each side rendered its own prompt, each engine also names its special tokens
    among its prompt ids and, where the texts differ only by NFC, tokenizes the NFC text
    (what :func:`~pytest_infercheck.metrics.tokenization.compare_tokenizations` needs for
    stages 1-3)."""
    record = inputs.record
    comparable = _comparable_ids(baseline, test, inputs, base, other)
    text_side = None
    pieces: dict[int, str] = {}
    base_prompt = PromptSide(inputs.base_rendered, record.base_ids)
    test_prompt = PromptSide(inputs.test_rendered, record.test_ids)
    if not verdict.same:
        text_side = text_side_verdict(cache, baseline, test, base, other)
        lookups = origin_lookups(baseline, test, inputs, base, other)
        for target, ids in ((baseline, lookups.base_ids), (test, lookups.test_ids)):
            named = cache.call(target, target.backend.token_pieces(ids)) if ids else None
            pieces.update(zip(ids, named or [], strict=False))
        if not record.shared:
            base_prompt, test_prompt = (
                _with_specials(cache, baseline, base_prompt, test_prompt),
                _with_specials(cache, test, test_prompt, base_prompt),
            )
            texts = nfc_probe_texts(base_prompt, test_prompt, pieces)
            if texts is not None:
                base_prompt = _with_nfc_ids(cache, baseline, base_prompt, texts[0])
                test_prompt = _with_nfc_ids(cache, test, test_prompt, texts[1])
    return locate_origin(
        shared_prompt=record.shared,
        base_prompt=base_prompt,
        test_prompt=test_prompt,
        outputs_same=verdict.same,
        base_text=base.text,
        test_text=other.text,
        base_ids=base.token_ids if comparable else None,
        test_ids=other.token_ids if comparable else None,
        text_side=text_side,
        pieces=pieces,
    )


def _comparable_ids(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
) -> bool:
    """Whether the generated ids of both sides are compared: both have ids, of one
    vocabulary (the sides received one prompt's ids, or their tokenizers' fingerprints are
    equal)."""
    fingerprint = baseline.backend.tokenizer_fingerprint()
    same_vocab = inputs.record.shared or (
        fingerprint is not None and fingerprint == test.backend.tokenizer_fingerprint()
    )
    return same_vocab and base.token_ids is not None and other.token_ids is not None


class OriginLookups(NamedTuple):
    """What :func:`_origin` asks the engines about a prompt whose outputs differ, besides
    special tokens and NFC probes of prompts the sides rendered each their own way."""

    base_ids: list[int]
    """The ids the baseline's engine names (:func:`_named` of its prompt and output), sorted."""
    test_ids: list[int]
    """The ids only the test side has that its engine names, sorted."""
    retokenized: list[int] | None
    """The baseline's ids that the baseline detokenizes to judge a text-only test side
    (:func:`.retokenize.judged_ids`)."""


def origin_lookups(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    inputs: SideInputs,
    base: Generation,
    other: Generation,
) -> OriginLookups:
    """The engine lookups of :func:`_origin` for outputs ``base`` and ``other`` that differ,
    so that a run can ask every prompt's at once before its items (:func:`look_up_origins`).
    Ids are named only where the origin's detail shows them: a prompt's when the sides
    rendered each their own (stages 1-3 compare the prompts), the first differing step's
    when the generated ids are compared."""
    record = inputs.record
    base_ids: set[int] = set()
    test_ids: set[int] = set()
    if not record.shared:
        base_ids |= _named(record.base_ids, record.test_ids)
        test_ids |= _named(record.test_ids, record.base_ids)
    if _comparable_ids(baseline, test, inputs, base, other):
        base_ids |= _named(base.token_ids, other.token_ids, prompt=False)
        test_ids |= _named(other.token_ids, base.token_ids, prompt=False)
    return OriginLookups(
        sorted(base_ids), sorted(test_ids - base_ids), judged_ids(test, base, other)
    )


def look_up_origins(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    compared: Sequence[tuple[SideInputs, Generation, Generation]],
) -> None:
    """Ask, for every (inputs, baseline output, test output) of ``compared`` whose outputs
    differ, the lookups of its divergence origin at once (concurrent requests to an HTTP
    engine), ahead of the items, which then find them answered; one request after another,
    item by item, took 0.1 s of a 20-prompt diff."""
    lookups = [
        origin_lookups(baseline, test, inputs, base, other)
        for inputs, base, other in compared
        if not outputs_verdict(inputs, base, other).same
    ]
    if not lookups:
        return
    judged = [lk.retokenized for lk in lookups if lk.retokenized is not None]
    cache.look_up_ahead(baseline, [i for lk in lookups for i in lk.base_ids], judged)
    cache.look_up_ahead(test, [i for lk in lookups for i in lk.test_ids], [])


def _named(
    ids: Sequence[int] | None, other: Sequence[int] | None, *, prompt: bool = True
) -> set[int]:
    """The ids of ``ids`` that the prompt comparison looks at, so that only those are asked
    for their texts and whether they are special (a server answers one request per id): of
    a prompt, the first :data:`LEADING`, :data:`WINDOW` from the first difference with
    ``other`` and the last :data:`WINDOW` (an added EOS), as the ``tokenization`` check
    asks; of a generation, the first differing step's."""
    if not ids:
        return set()
    at = first_divergence(list(ids), list(other or ())) or 0
    if prompt:
        positions = {*range(LEADING), *range(at, at + WINDOW), *range(len(ids) - WINDOW, len(ids))}
    else:
        positions = {at}
    return {ids[p] for p in positions if 0 <= p < len(ids)}


def _with_specials(
    cache: GenerationCache, target: ResolvedTarget, side: PromptSide, other: PromptSide
) -> PromptSide:
    """``side`` with the special tokens, by its engine, among its :func:`_named` ids."""
    if not side.ids:
        return side
    chosen = sorted(_named(side.ids, other.ids))
    special = cache.call(target, target.backend.special_tokens(chosen))
    return replace(side, special=frozenset(special or ()))


def _with_nfc_ids(
    cache: GenerationCache, target: ResolvedTarget, side: PromptSide, nfc_text: str
) -> PromptSide:
    """``side`` with its engine's ids of the NFC-normalised text (stage 3's normalisation)."""
    return replace(side, nfc_ids=cache.call(target, target.backend.tokenize(nfc_text)))


def _distributions(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
    other: Generation,
    shared_ids: bool,
    verdict: Sameness,
) -> _Distributions:
    """The strongest comparison of the two sides' distributions that both allow."""
    caps_b, caps_t = baseline.backend.capabilities, test.backend.capabilities
    forced = shared_ids and prompt_ids is not None and bool(base.token_ids)
    if forced and caps_b.teacher_forcing and caps_t.teacher_forcing:
        assert prompt_ids is not None and base.token_ids
        # Both sides score the baseline's continuation (with its EOS) after the same prompt
        # ids: the test side's own continuation would condition on other prefixes. A
        # lockstep run has accumulated the same statistics while generating.
        stats = cache.position_stats(baseline, test, list(prompt_ids), base.token_ids)
        scoring = "lockstep"
        if stats is None:
            base_lp = cache.score(baseline, list(prompt_ids), base.token_ids)
            test_lp = cache.score(test, list(prompt_ids), base.token_ids)
            stats = position_stats(base_lp, test_lp, base.token_ids)
            scoring = "separate"
        return _from_stats(TEACHER_FORCED, stats, scoring)
    if forced and _scores(caps_b) and _scores(caps_t):
        assert prompt_ids is not None and base.token_ids
        return _from_stats(
            TEACHER_FORCED_TOP_K,
            _top_k_forced(cache, baseline, test, list(prompt_ids), base.token_ids),
            "separate",
        )
    if forced and caps_b.teacher_forcing and other.top_logprobs and other.top_keys == "id":
        assert prompt_ids is not None and base.token_ids
        # The test side reports only its top-k (llama-server at a vocabulary it does not score
        # in full): the baseline's teacher-forced rows restricted to the test's top-k ids give
        # the tightest lower bound of KL(base || test) those allow, at the positions where
        # both sides had the same prefix (up to and including the first divergence).
        base_lp = cache.score(baseline, list(prompt_ids), base.token_ids)
        n = min(len(other.top_logprobs), len(base.token_ids))
        at = verdict.first_divergence if verdict.divergence_unit == "token" else None
        n = n if at is None else min(n, at + 1)
        test_top = other.top_logprobs[:n]
        base_top = [{v: float(base_lp[t, v]) for v in row} for t, row in enumerate(test_top)]
        kl = topk_kl_lower_bound_positions(base_top, test_top)
        problems: list[Problem] = [
            *check_logprob_rows("baseline logprobs", base_lp[:n]),
            *check_topk_rows("test top-k logprobs", test_top),
        ]
        kl_problem = check_values("KL", kl)
        if kl_problem is not None:
            problems.append(kl_problem)
        return _Distributions(TOP_K_LOWER_BOUND, kl.tolist(), [], [], tuple(problems))
    if golden_scorable(baseline, test, shared_ids, prompt_ids, base):
        assert prompt_ids is not None and base.token_ids and base.top_logprobs
        chosen = base.chosen_logprobs or []
        if caps_t.teacher_forcing:
            test_lp = cache.score(test, list(prompt_ids), base.token_ids)
            stats = topk_vs_full_stats(base.top_logprobs, chosen, test_lp, base.token_ids)
        else:
            rows = cache.score_top_k(test, list(prompt_ids), base.token_ids)
            stats = topk_pair_stats(
                base.top_logprobs,
                chosen,
                [r.top for r in rows],
                [r.chosen for r in rows],
                base.token_ids,
            )
        return _from_stats(GOLDEN_TOP_K_LOWER_BOUND, stats)
    return _free_running_top_k(baseline, test, base, other, shared_ids, verdict)


def _scores(caps: Capabilities) -> bool:
    """Whether a side scores a given continuation teacher-forced (full rows or top-k)."""
    return caps.teacher_forcing or caps.teacher_forcing_top_k > 0


def _from_stats(method: str, stats: PositionStats, scoring: str = "") -> _Distributions:
    return _Distributions(
        method,
        stats.kl.tolist(),
        stats.same_top.tolist(),
        stats.delta_p.tolist(),
        stats.problems,
        scoring,
    )


def _top_k_forced(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: list[int],
    continuation: list[int],
) -> PositionStats:
    """Both sides scored on the baseline's continuation, at least one by its top k only:
    full rows against top-k rows (:func:`~pytest_infercheck.metrics.topk_full.
    full_vs_topk_stats`, or :func:`~pytest_infercheck.metrics.topk_full.topk_vs_full_stats`
    with the sides the other way round), or top-k against top-k
    (:func:`~pytest_infercheck.metrics.kl.topk_pair_stats`)."""
    full_b = baseline.backend.capabilities.teacher_forcing
    full_t = test.backend.capabilities.teacher_forcing
    if full_b:
        base_lp = cache.score(baseline, prompt_ids, continuation)
        rows = cache.score_top_k(test, prompt_ids, continuation)
        return full_vs_topk_stats(
            base_lp, [r.top for r in rows], [r.chosen for r in rows], continuation
        )
    base_rows = cache.score_top_k(baseline, prompt_ids, continuation)
    base_top = [{**r.top, c: r.chosen} for r, c in zip(base_rows, continuation, strict=True)]
    base_chosen = [r.chosen for r in base_rows]
    if full_t:
        test_lp = cache.score(test, prompt_ids, continuation)
        return topk_vs_full_stats(base_top, base_chosen, test_lp, continuation)
    rows = cache.score_top_k(test, prompt_ids, continuation)
    return topk_pair_stats(
        base_top, base_chosen, [r.top for r in rows], [r.chosen for r in rows], continuation
    )


def _free_running_top_k(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    base: Generation,
    other: Generation,
    shared_ids: bool,
    verdict: Sameness,
) -> _Distributions:
    """Each side's own top-k, compared up to and including the first divergent token (the
    later positions condition on different prefixes), never past it: ``text`` with the
    reason (:func:`_text_only_reason`) when the logprobs cannot be compared or the first
    divergent token cannot be located (:func:`token_divergence`)."""
    reason = _text_only_reason(
        (base, baseline.backend.logprob_unavailable_reason()),
        (other, test.backend.logprob_unavailable_reason()),
        shared_ids,
    )
    if reason:
        return _Distributions(TEXT_ONLY, [], [], [], note=reason)
    assert base.top_logprobs and other.top_logprobs
    n = min(len(base.top_logprobs), len(other.top_logprobs))
    note = ""
    if not verdict.same:
        at, how = token_divergence(test, base, other, verdict)
        if at is None:
            return _Distributions(
                TEXT_ONLY,
                [],
                [],
                [],
                note=(
                    f"the outputs differ ({verdict.describe()}) and the first differing token "
                    "cannot be located (no shared ids, no token texts, no tokenizer to "
                    "re-tokenise with): positions after it would compare different prefixes"
                ),
            )
        n = min(n, at + 1)
        note = f"compared up to the first differing token {at}, found {how}"
    base_top, test_top = base.top_logprobs[:n], other.top_logprobs[:n]
    kl = topk_kl_lower_bound_positions(base_top, test_top)
    problems: list[Problem] = [
        *check_topk_rows("baseline top-k logprobs", base_top),
        *check_topk_rows("test top-k logprobs", test_top),
    ]
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return _Distributions(TOP_K_LOWER_BOUND, kl.tolist(), [], [], tuple(problems), note=note)


def _text_only_reason(
    baseline: tuple[Generation, str | None], test: tuple[Generation, str | None], shared_ids: bool
) -> str:
    """Why the two sides' own top-k logprobs cannot be compared ("" when they can); each side
    is its generation and its backend's reason for giving no logprobs, if it knows one
    (:meth:`~pytest_infercheck.backends.base.Backend.logprob_unavailable_reason`)."""
    (base, _), (other, _) = baseline, test
    for side, (generation, why) in (("the baseline", baseline), ("the test side", test)):
        if not generation.top_logprobs:
            return f"{side} returned no top-k logprobs" + (f" ({why})" if why else "")
    if base.top_keys != other.top_keys:
        return (
            f"the baseline keys its top-k logprobs by token {base.top_keys}, the test side by "
            f"token {other.top_keys}: the two are not compared"
        )
    if base.top_keys == "id" and not shared_ids:
        return (
            "the sides rendered the prompt each their own way, so their token ids are not "
            "known to mean the same"
        )
    return ""


def token_divergence(
    test: ResolvedTarget, base: Generation, other: Generation, verdict: Sameness
) -> tuple[int | None, str]:
    """The first differing token of two outputs that differ, and how it was found: by id or
    by token text (the verdict's), by the token texts :func:`step_texts` reads from each
    side's top-k, or by re-tokenising both texts with the test side's served folder
    (:func:`.retokenize.retokenized_divergence`); ``(None, "")`` when none can tell."""
    if verdict.divergence_unit == "token" and verdict.first_divergence is not None:
        return (
            verdict.first_divergence,
            f"by token {'id' if verdict.ids_equal is False else 'text'}",
        )
    base_texts, test_texts = step_texts(base), step_texts(other)
    at = None
    if base_texts is not None and test_texts is not None:
        at = first_divergence(base_texts, test_texts)
    if at is not None:
        return at, "by token text (each step's token read from its top-k)"
    at = retokenized_divergence(test, base.text, other.text)
    if at is not None:
        return at, "by re-tokenising both outputs with the served model folder's tokenizer"
    return None, ""


def step_texts(generation: Generation) -> list[str] | None:
    """Each generated token's text: the generation's own (``token_texts``), else, for top-k
    logprobs keyed by text, each step's entry whose logprob equals the chosen token's (it
    must be the only one), kept only when they join into the generation's text exactly;
    None otherwise."""
    if generation.token_texts is not None:
        return list(generation.token_texts)
    top, chosen = generation.top_logprobs, generation.chosen_logprobs
    if generation.top_keys != "text" or not top or not chosen or len(top) != len(chosen):
        return None
    texts = []
    for step, value in zip(top, chosen, strict=True):
        matches = [key for key, lp in step.items() if lp == value]
        if len(matches) != 1:
            return None
        texts.append(str(matches[0]))
    return texts if "".join(texts) == generation.text else None


def _answers(prompt: Prompt, base: Generation, other: Generation) -> _Answers:
    if prompt.answer_kind is None:
        return _Answers()
    judged = judge_answers(
        prompt.answer_kind,
        prompt.answer,
        base.text,
        other.text,
        base_calls=base.tool_calls,
        test_calls=other.tool_calls,
    )
    return _Answers(
        answer_kind=prompt.answer_kind,
        reference=prompt.answer,
        base_answer=judged.base.raw if judged.base else None,
        test_answer=judged.test.raw if judged.test else None,
        flip=judged.flip.value,
    )
