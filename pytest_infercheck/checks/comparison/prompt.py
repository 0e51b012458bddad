"""One prompt, two targets: generate both, score teacher-forced, compare answers and text.

The comparison method is the strongest both sides allow, and is recorded:

- ``teacher-forced``: the baseline's continuation C (including its EOS) is scored by both
  targets on the same prompt ids; KL_t over the full vocabulary at every position of C.
- ``top-k-lower-bound``: free-running top-k logprobs of both generations, only up to the
  first divergent token (later positions condition on different prefixes); a lower bound.
- ``golden-top-k-lower-bound``: the baseline is a golden file (no live model, so it cannot
  score): its continuation is scored teacher-forced on the test side and compared at every
  position with the golden's recorded top-k (tail bucket, a lower bound).
- ``text``: no usable logprobs; text similarity, first divergence and answers only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ...backends import Generation
from ...golden import golden_scorable
from ...metrics.answers import FlipKind, judge_answers
from ...metrics.kl import position_stats, topk_kl_lower_bound_positions
from ...metrics.sameness import compare_outputs
from ...metrics.text import severity, similarity
from ...metrics.topk_full import topk_vs_full_stats

if TYPE_CHECKING:
    from ...backends import GenerationParams
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt

TEACHER_FORCED = "teacher-forced"
TOP_K_LOWER_BOUND = "top-k-lower-bound"
GOLDEN_TOP_K_LOWER_BOUND = "golden-top-k-lower-bound"
TEXT_ONLY = "text"


@dataclass
class PromptComparison:
    """Everything measured for one prompt and one pair; plain types only (xdist, JSON)."""

    prompt_id: str
    prompt_text: str
    baseline: str
    test: str
    method: str
    base_text: str
    test_text: str
    base_ids: list[int] | None
    test_ids: list[int] | None
    base_finish: str
    test_finish: str
    first_divergence: int | None
    """The first differing token (by id where both sides share the token ids, else by token
    text); None when the outputs do not differ token by token."""
    similarity: float
    severity: str
    kl_per_position: list[float] = field(default_factory=list)
    same_top: list[bool] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)
    answer_kind: str | None = None
    reference: str | None = None
    base_answer: str | None = None
    test_answer: str | None = None
    flip: str = "unchanged"
    sameness: str = ""
    """The sameness verdict on the two outputs (ids and text,
    :func:`~pytest_infercheck.metrics.sameness.compare_outputs`), e.g. ``identical`` or
    ``same token ids, text differs from character 3 (detokenization difference)``."""
    templated: bool = False
    base_reasoning_chars: int = 0
    test_reasoning_chars: int = 0
    """Length of a reasoning chain a side returned apart from its answer (compared: answers)."""

    @property
    def kl_mean(self) -> float | None:
        """Mean of KL_t over the compared positions (None without logprobs)."""
        kl = self.kl_per_position
        return sum(kl) / len(kl) if kl else None

    @property
    def kl_max(self) -> float | None:
        return max(self.kl_per_position) if self.kl_per_position else None

    @property
    def same_top_rate(self) -> float | None:
        st = self.same_top
        return sum(st) / len(st) if st else None

    @property
    def is_flip(self) -> bool:
        return FlipKind(self.flip).is_flip

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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
) -> PromptComparison:
    """Compare ``test`` against ``baseline`` on ``prompt`` (see the module docstring)."""
    rendered = cache.render(baseline, prompt, thinking)
    shared_ids = cache.accepts_ids(test, rendered)
    test_input = rendered if shared_ids else cache.render(test, prompt, thinking)
    base = cache.generate(baseline, rendered, params, run=base_run)
    other = cache.generate(test, test_input, params, run=test_run)

    verdict = compare_outputs(
        base.text,
        base.token_ids if shared_ids else None,  # ids of two tokenizers are not comparable
        other.text,
        other.token_ids if shared_ids else None,
        base.extra.get("tokens"),
        other.extra.get("tokens"),
    )
    divergence = verdict.first_divergence if verdict.divergence_unit == "token" else None
    sim = similarity(base.text, other.text)
    result = PromptComparison(
        prompt_id=prompt.id,
        prompt_text=prompt.text,
        baseline=baseline.label,
        test=test.label,
        method=TEXT_ONLY,
        base_text=base.text,
        test_text=other.text,
        base_ids=base.token_ids,
        test_ids=other.token_ids,
        base_finish=base.finish_reason,
        test_finish=other.finish_reason,
        first_divergence=divergence,
        similarity=sim,
        severity=severity(verdict.same, sim).value,
        sameness=verdict.describe(),
        templated=rendered.templated,
        base_reasoning_chars=len(base.extra.get("reasoning") or ""),
        test_reasoning_chars=len(other.extra.get("reasoning") or ""),
    )
    _add_logprob_metrics(cache, baseline, test, rendered.token_ids, base, other, shared_ids, result)
    _add_answers(prompt, result)
    return result


def _add_logprob_metrics(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
    other: Generation,
    shared_ids: bool,
    result: PromptComparison,
) -> None:
    caps_b, caps_t = baseline.backend.capabilities, test.backend.capabilities
    if (
        shared_ids
        and prompt_ids is not None
        and caps_b.teacher_forcing
        and caps_t.teacher_forcing
        and base.token_ids
    ):
        base_lp = cache.score(baseline, list(prompt_ids), base.token_ids)
        test_lp = cache.score(test, list(prompt_ids), base.token_ids)
        stats = position_stats(base_lp, test_lp, base.token_ids)
        result.method = TEACHER_FORCED
        result.kl_per_position = stats.kl.tolist()
        result.same_top = stats.same_top.tolist()
        result.delta_p = stats.delta_p.tolist()
    elif golden_scorable(baseline, test, shared_ids, prompt_ids, base):
        assert prompt_ids is not None and base.token_ids and base.top_logprobs
        test_lp = cache.score(test, list(prompt_ids), base.token_ids)
        stats = topk_vs_full_stats(
            base.top_logprobs, base.chosen_logprobs or [], test_lp, base.token_ids
        )
        result.method = GOLDEN_TOP_K_LOWER_BOUND
        result.kl_per_position = stats.kl.tolist()
        result.same_top = stats.same_top.tolist()
        result.delta_p = stats.delta_p.tolist()
    elif (
        base.top_logprobs
        and other.top_logprobs
        and base.top_keys == other.top_keys
        and (shared_ids or base.top_keys == "text")
    ):
        upto = result.first_divergence
        n = min(len(base.top_logprobs), len(other.top_logprobs))
        n = n if upto is None else min(n, upto + 1)
        result.method = TOP_K_LOWER_BOUND
        result.kl_per_position = topk_kl_lower_bound_positions(
            base.top_logprobs[:n], other.top_logprobs[:n]
        ).tolist()


def _add_answers(prompt: Prompt, result: PromptComparison) -> None:
    if prompt.answer_kind is None:
        return
    judged = judge_answers(prompt.answer_kind, prompt.answer, result.base_text, result.test_text)
    result.answer_kind = prompt.answer_kind
    result.reference = prompt.answer
    result.base_answer = judged.base.raw if judged.base else None
    result.test_answer = judged.test.raw if judged.test else None
    result.flip = judged.flip.value
