"""The gather facet's scoring of one prompt: the strongest comparison of both sides'
distributions that they allow (the method, see :mod:`.prompt`), and both sides' margins at
the first divergent token.

Every row is fetched once and read by everything that needs it: a lockstep run's
statistics (:mod:`.batched`) already hold, at every position of the baseline's continuation,
``KL_t``, the test side's most likely token and both margins
(:class:`~pytest_infercheck.metrics.forced.ForcedStats`), so a lockstep comparison scores
nothing; a separate teacher-forced scoring keeps its rows (:class:`Scored`) for the margins.
Only a margin that neither the generations nor the rows in hand can give asks the engine
for its teacher-forced rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...golden import golden_scorable
from ...metrics import keys
from ...metrics.faults import Fault
from ...metrics.finite import check_logprob_rows, check_topk_rows, check_values
from ...metrics.forced import ForcedArgmax, ForcedStats, forced_full, forced_rows
from ...metrics.kl import (
    PositionStats,
    position_stats,
    topk_kl_lower_bound_positions,
    topk_pair_stats,
)
from ...metrics.text import first_divergence
from ...metrics.ties import Margin, full_row_margin, top_k_margin
from ...metrics.topk_full import full_vs_topk_stats, topk_vs_full_stats
from .evidence import (
    GOLDEN_TOP_K_LOWER_BOUND,
    TEACHER_FORCED,
    TEACHER_FORCED_TOP_K,
    TEXT_ONLY,
    TOP_K_LOWER_BOUND,
    Distributions,
)
from .retokenize import retokenized_divergence

if TYPE_CHECKING:
    from ...backends import Capabilities, Generation
    from ...backends.base import TopKRow
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...metrics.sameness import Sameness


@dataclass
class Scored:
    """A prompt's :class:`~.evidence.Distributions` and the teacher-forced full rows it
    fetched (by side: ``baseline``, ``test``), which the margins read."""

    distributions: Distributions
    rows: dict[str, Any] = field(default_factory=dict)


def distributions(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
    other: Generation,
    shared_ids: bool,
    verdict: Sameness,
) -> Scored:
    """The strongest comparison of the two sides' distributions that both allow."""
    caps_b, caps_t = baseline.backend.capabilities, test.backend.capabilities
    forced = shared_ids and prompt_ids is not None and bool(base.token_ids)
    if forced and caps_b.teacher_forcing and caps_t.teacher_forcing:
        assert prompt_ids is not None and base.token_ids
        # Both sides score the baseline's continuation (with its EOS) after the same prompt
        # ids: the test side's own continuation would condition on other prefixes. A
        # lockstep run has accumulated the same statistics while generating.
        stats = cache.position_stats(baseline, test, list(prompt_ids), base.token_ids)
        if stats is not None:
            argmax = stats.forced if isinstance(stats, ForcedStats) else None
            return Scored(_from_stats(TEACHER_FORCED, stats, "lockstep", argmax))
        base_lp = cache.score(baseline, list(prompt_ids), base.token_ids)
        test_lp = cache.score(test, list(prompt_ids), base.token_ids)
        stats = position_stats(base_lp, test_lp, base.token_ids)
        argmax = forced_full(base_lp, test_lp, base.token_ids)
        return Scored(
            _from_stats(TEACHER_FORCED, stats, "separate", argmax),
            {"baseline": base_lp, "test": test_lp},
        )
    if forced and _scores(caps_b) and _scores(caps_t):
        assert prompt_ids is not None and base.token_ids
        return _top_k_forced(cache, baseline, test, list(prompt_ids), base.token_ids)
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
        problems: list[Fault] = [
            *check_logprob_rows("baseline logprobs", base_lp[:n]),
            *check_topk_rows("test top-k logprobs", test_top),
        ]
        kl_problem = check_values("KL", kl)
        if kl_problem is not None:
            problems.append(kl_problem)
        found = Distributions(TOP_K_LOWER_BOUND, kl.tolist(), [], [], tuple(problems))
        return Scored(found, {"baseline": base_lp})
    if golden_scorable(baseline, test, shared_ids, prompt_ids, base):
        assert prompt_ids is not None and base.token_ids and base.top_logprobs
        chosen = base.chosen_logprobs or []
        golden_rows = [
            {**top, c: lp}
            for top, c, lp in zip(base.top_logprobs, base.token_ids, chosen, strict=False)
        ]
        if caps_t.teacher_forcing:
            test_lp = cache.score(test, list(prompt_ids), base.token_ids)
            stats = topk_vs_full_stats(base.top_logprobs, chosen, test_lp, base.token_ids)
            argmax = _argmax_of(golden_rows, list(test_lp), base.token_ids)
            return Scored(
                _from_stats(GOLDEN_TOP_K_LOWER_BOUND, stats, "", argmax), {"test": test_lp}
            )
        rows = cache.score_top_k(test, list(prompt_ids), base.token_ids)
        stats = topk_pair_stats(
            base.top_logprobs,
            chosen,
            [r.top for r in rows],
            [r.chosen for r in rows],
            base.token_ids,
        )
        argmax = _argmax_of(golden_rows, _maps(rows, base.token_ids), base.token_ids)
        return Scored(_from_stats(GOLDEN_TOP_K_LOWER_BOUND, stats, "", argmax))
    return Scored(_free_running_top_k(baseline, test, base, other, shared_ids, verdict))


def planned_scorings(
    baseline: ResolvedTarget, test: ResolvedTarget, shared_ids: bool, base: Generation
) -> list[tuple[str, bool]]:
    """The scorings :func:`distributions` asks of an item whose sides received the same
    prompt ids (``shared_ids``), before it knows the test side's output: its first two ways
    (both sides full rows; else both scoring, one or both by top k), as ``(side, top_k)``
    with side ``baseline`` or ``test``; none for the ways that read the test side's output
    or a golden (:mod:`.ahead` makes these requests ahead of the items)."""
    caps_b, caps_t = baseline.backend.capabilities, test.backend.capabilities
    if not (shared_ids and base.token_ids):
        return []
    if caps_b.teacher_forcing and caps_t.teacher_forcing:
        return [("baseline", False), ("test", False)]
    if not (_scores(caps_b) and _scores(caps_t)):
        return []
    if caps_b.teacher_forcing:
        return [("baseline", False), ("test", True)]
    return [("baseline", True), ("test", not caps_t.teacher_forcing)]


def _scores(caps: Capabilities) -> bool:
    """Whether a side scores a given continuation teacher-forced (full rows or top-k)."""
    return caps.teacher_forcing or caps.teacher_forcing_top_k > 0


def _from_stats(
    method: str, stats: PositionStats, scoring: str = "", forced: ForcedArgmax | None = None
) -> Distributions:
    return Distributions(
        method,
        stats.kl.tolist(),
        stats.same_top.tolist(),
        stats.delta_p.tolist(),
        stats.problems,
        scoring,
        forced=forced,
    )


def _maps(rows: list[TopKRow], continuation: list[int]) -> list[dict[int, float]]:
    """Top-k rows as maps holding the given token's logprob."""
    return [{**r.top, c: r.chosen} for r, c in zip(rows, continuation, strict=True)]


def _argmax_of(base: list[Any], test: list[Any], continuation: list[int]) -> ForcedArgmax | None:
    """:func:`~pytest_infercheck.metrics.forced.forced_rows`, or None when the rows do not
    cover the continuation (a golden recorded with fewer positions) or lack a token."""
    if not len(base) == len(test) == len(continuation):
        return None
    try:
        return forced_rows(base, test, continuation)
    except ValueError:
        return None


def _top_k_forced(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: list[int],
    continuation: list[int],
) -> Scored:
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
        stats = full_vs_topk_stats(
            base_lp, [r.top for r in rows], [r.chosen for r in rows], continuation
        )
        argmax = _argmax_of(list(base_lp), _maps(rows, continuation), continuation)
        return Scored(
            _from_stats(TEACHER_FORCED_TOP_K, stats, "separate", argmax), {"baseline": base_lp}
        )
    base_rows = cache.score_top_k(baseline, prompt_ids, continuation)
    base_top = _maps(base_rows, continuation)
    base_chosen = [r.chosen for r in base_rows]
    if full_t:
        test_lp = cache.score(test, prompt_ids, continuation)
        stats = topk_vs_full_stats(base_top, base_chosen, test_lp, continuation)
        argmax = _argmax_of(base_top, list(test_lp), continuation)
        return Scored(
            _from_stats(TEACHER_FORCED_TOP_K, stats, "separate", argmax), {"test": test_lp}
        )
    rows = cache.score_top_k(test, prompt_ids, continuation)
    stats = topk_pair_stats(
        base_top, base_chosen, [r.top for r in rows], [r.chosen for r in rows], continuation
    )
    argmax = _argmax_of(base_top, _maps(rows, continuation), continuation)
    return Scored(_from_stats(TEACHER_FORCED_TOP_K, stats, "separate", argmax))


def _free_running_top_k(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    base: Generation,
    other: Generation,
    shared_ids: bool,
    verdict: Sameness,
) -> Distributions:
    """Each side's own top-k, compared up to and including the first divergent token (the
    later positions condition on different prefixes), never past it: ``text`` with the
    reason (:func:`text_only_reason`) when the logprobs cannot be compared or the first
    divergent token cannot be located (:func:`token_divergence`)."""
    reason = text_only_reason(
        (base, baseline.backend.logprob_unavailable_reason()),
        (other, test.backend.logprob_unavailable_reason()),
        shared_ids,
    )
    if reason:
        return Distributions(TEXT_ONLY, [], [], [], note=reason)
    assert base.top_logprobs and other.top_logprobs
    n = min(len(base.top_logprobs), len(other.top_logprobs))
    note = ""
    if not verdict.same:
        at, how = token_divergence(test, base, other, verdict)
        if at is None:
            return Distributions(
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
    problems: list[Fault] = [
        *check_topk_rows("baseline top-k logprobs", base_top),
        *check_topk_rows("test top-k logprobs", test_top),
    ]
    kl_problem = check_values("KL", kl)
    if kl_problem is not None:
        problems.append(kl_problem)
    return Distributions(TOP_K_LOWER_BOUND, kl.tolist(), [], [], tuple(problems), note=note)


def text_only_reason(
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
    logprobs keyed by text, each step's token located by :func:`.keys.step_texts` (never
    through an ambiguous key); None otherwise."""
    if generation.token_texts is not None:
        return list(generation.token_texts)
    if generation.top_keys != "text":
        return None
    return keys.step_texts(generation.top_logprobs, generation.chosen_logprobs, generation.text)


# -- margins at the first divergent token ---------------------------------------------------
def margins(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
    other: Generation,
    at: int | None,
    scored: Scored,
) -> tuple[Margin | None, Margin | None] | None:
    """Each side's margin at the first divergent token ``at`` (None: no divergence), under
    its own distribution there (both sides saw the same prefix), from the first of: the
    generation's full rows; its top-k when it holds the other token (exact); the
    teacher-forced numbers in hand (a lockstep's :class:`~pytest_infercheck.metrics.forced.
    ForcedArgmax` at ``at``, or the rows :func:`distributions` fetched); the side's
    teacher-forced full rows of the baseline's continuation (same prefix up to ``at``),
    fetched only then; its top-k's lower bound. Keys are token ids where both sides received
    the same prompt ids (``prompt_ids`` given), else token texts for a side whose top-k is
    keyed by text."""
    if at is None:
        return None
    forced = scored.distributions.forced
    by_id = prompt_ids is not None

    def side(
        name: str, target: ResolvedTarget, own: Generation, versus: Generation
    ) -> Margin | None:
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
        if by_id and base.token_ids:
            in_hand = _in_hand(name, forced, scored.rows.get(name), at, int(mine), int(theirs))
            if in_hand is not None:
                return in_hand
            if prompt_ids is not None and target.backend.capabilities.teacher_forcing:
                rows = cache.score(target, list(prompt_ids), base.token_ids)
                return full_row_margin(rows[at], int(mine), int(theirs))
        return from_top

    return side("baseline", baseline, base, other), side("test", test, other, base)


def _in_hand(
    name: str, forced: ForcedArgmax | None, rows: Any, at: int, mine: int, theirs: int
) -> Margin | None:
    """A side's margin at ``at`` from what the scoring already holds: the side's full rows,
    else the lockstep's numbers when the test side's token there is the one they name (the
    test side's most likely token under the same prefix)."""
    if isinstance(rows, np.ndarray) and at < len(rows):
        return full_row_margin(rows[at], mine, theirs)
    if forced is None or at >= len(forced) or not forced.exact[at]:
        return None
    base_token, test_token = (mine, theirs) if name == "baseline" else (theirs, mine)
    if forced.chosen[at] != base_token or forced.test_top[at] != test_token:
        return None
    base_margin, test_margin = forced.margins(at)
    return base_margin if name == "baseline" else test_margin
