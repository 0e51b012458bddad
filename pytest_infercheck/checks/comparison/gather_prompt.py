"""The gather facet's work on one prompt x test side: every request its comparison needs,
made (or found made: a run generates and scores its prompts at once, :mod:`.gather`) and
collected into a :class:`~.evidence.PromptEvidence`, which the judge reads without any I/O.

In order: both sides' inputs (:mod:`.inputs`), both generations, the distributions compared
and the margins at the first divergent token (:mod:`.scoring`), where the divergence starts
(:mod:`.origins`), each side's batch and features, and a conversation's generated turns on
the baseline's history (the test side generates each from the same concrete turns).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...conversation import history
from ...features import ADAPTER, FeatureActivity, adapter_differs, feature_record
from ...metrics.ties import DEFAULT_TIE_MARGIN
from .evidence import PromptEvidence, TurnEvidence, outputs_verdict
from .inputs import decide_inputs
from .judge import build_record
from .origins import origin
from .scoring import distributions, margins
from .spec import Thresholds

if TYPE_CHECKING:
    from ...backends import Generation, GenerationParams, PromptInput
    from ...conversation import Conversation
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...suites import Prompt
    from .inputs import SideInputs
    from .prompt import PromptComparison


def gather_prompt(
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
    conversation: Conversation | None = None,
) -> PromptEvidence:
    """The evidence of ``test`` against ``baseline`` on ``prompt`` (see the module
    docstring); ``inputs``: the sides' inputs when already decided
    (:func:`.inputs.decide_inputs`); ``batching_note``: why in-process sides were generated
    one at a time, if they were; ``conversation``: a ``messages`` prompt filled in by the
    baseline (its turns are both sides' history)."""
    if inputs is None:
        inputs = decide_inputs(cache, baseline, test, prompt, thinking)
    rendered, test_input = inputs.base, inputs.test
    shared_ids = inputs.record.shared
    base = cache.generate(baseline, rendered, params, run=base_run)
    other = cache.generate(test, test_input, params, run=test_run)
    verdict = outputs_verdict(inputs, base, other)
    divergence = verdict.first_divergence if verdict.divergence_unit == "token" else None
    scored = distributions(
        cache, baseline, test, rendered.token_ids, base, other, shared_ids, verdict
    )
    prompt_ids = rendered.token_ids if shared_ids else None
    found = margins(cache, baseline, test, prompt_ids, base, other, divergence, scored)
    turns = []
    if prompt.messages is not None and conversation is not None:
        turns = gather_turns(cache, baseline, test, prompt, conversation, params, thinking)
    return PromptEvidence(
        prompt=prompt,
        baseline=baseline.label,
        test=test.label,
        inputs=inputs,
        base=base,
        other=other,
        distributions=scored.distributions,
        margins=found,
        origin=origin(cache, baseline, test, inputs, base, other, verdict),
        base_batch=_batch_size(baseline, base),
        test_batch=_batch_size(test, other),
        batching_note=batching_note,
        feature_activity=[
            feature_record(
                side,
                target.label,
                target.backend.features,
                _activity(cache, target, side_input, params, generation),
            )
            for side, target, side_input, generation in (
                ("baseline", baseline, rendered, base),
                ("test", test, test_input, other),
            )
            if target.backend.features
        ],
        turns=turns,
        base_labels=token_labels(cache, baseline, base),
    )


def token_labels(
    cache: GenerationCache, target: ResolvedTarget, generation: Generation
) -> list[str] | None:
    """Each generated token's text, for the KL-per-position chart's labels, where the engine
    returned ids but no token texts (mlx-lm in-process): the backend's own pieces of the ids
    (:meth:`~pytest_infercheck.backends.base.Backend.token_pieces`). None when the engine
    gave texts (they are the labels), gave no ids, or names no pieces; a label only, never
    compared."""
    if generation.token_texts is not None or not generation.token_ids:
        return None
    pieces = cache.run(target.backend.token_pieces(list(generation.token_ids)))
    return None if pieces is None else list(pieces)


def _activity(
    cache: GenerationCache,
    target: ResolvedTarget,
    side_input: PromptInput,
    params: GenerationParams,
    generation: Generation,
) -> FeatureActivity | None:
    """What the engine reported of ``generation``'s features, and, for a side with a LoRA
    adapter, whether its output differs from the base model's on the same engine (one more
    request: :meth:`~pytest_infercheck.backends.base.Backend.generate_base`)."""
    if not any(f.name == ADAPTER for f in target.backend.features):
        return generation.activity
    base = cache.call(target, target.backend.generate_base(side_input, params))
    return dataclasses.replace(
        generation.activity or FeatureActivity(),
        adapter_differs=adapter_differs(generation, base),
    )


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
    """Compare ``test`` against ``baseline`` on ``prompt`` as a check item would: its
    evidence gathered (:func:`gather_prompt`), then its record made by the judge
    (:func:`~.judge.build_record`) with ``tie_margin``. For users' own tests
    (:meth:`~pytest_infercheck.fixtures.TargetHandle.compare_to`) and the unit tests."""
    evidence = gather_prompt(
        cache,
        baseline,
        test,
        prompt,
        params,
        thinking=thinking,
        base_run=base_run,
        test_run=test_run,
        inputs=inputs,
        batching_note=batching_note,
    )
    return build_record(evidence, Thresholds(tie_margin=tie_margin))


def gather_turns(
    cache: GenerationCache,
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    prompt: Prompt,
    conversation: Conversation,
    params: GenerationParams,
    thinking: bool,
) -> list[TurnEvidence]:
    """Every turn of ``prompt``'s ``conversation`` (the baseline's fill-in) before the final
    answer: given turns as they are, each generated turn generated by the test side from the
    baseline's history, with the inputs :func:`.inputs.decide_inputs` gives both sides for
    that history."""
    filled = conversation.filled()
    generated = {turn.index: turn for turn in conversation.generated}
    out: list[TurnEvidence] = []
    for index, turn in enumerate(conversation.turns):
        if turn.content is not None:
            out.append(TurnEvidence(index, turn.role, "given", turn.content))
            continue
        before = history(conversation.turns, index, filled)
        inputs = decide_inputs(cache, baseline, test, prompt, thinking, before)
        base = generated[index].generation
        other = cache.generate(test, inputs.test, params)
        out.append(TurnEvidence(index, turn.role, "generated", "", inputs, base, other))
    return out


def _batch_size(target: ResolvedTarget, generation: Generation) -> int | None:
    """How many prompts shared the generation's forward passes (``batched``, when the engine
    batched it; else an in-process engine generated it alone); None for a concurrent (HTTP)
    engine."""
    if generation.batched > 1:
        return generation.batched
    return 1 if target.backend.concurrency <= 1 else None
