"""The golden side of a compare check's run: recording its test side under
``--infercheck-record``, and checking that a golden may be replayed as its baseline.

Recording a prompt: the test side renders and generates it as usual (a conversation is
filled in by the test side, :meth:`~..generation_cache.GenerationCache.conversation`, and
each ``generate`` turn is recorded as filled in); when it can score teacher-forced (full
rows, or its top k: vLLM), its continuation is scored once more and each position's top-k (at
most ``golden_top_k``) and chosen logprobs are taken from those scores (the very
distributions a later replay compares with); otherwise the generation's own top-k logprobs
are kept, if any. Items do not write the file: they hand their entries to their test report
(see :mod:`.writer`), and the controller writes each golden once, at the end of the run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from .file import (
    GoldenError,
    engine_summary,
    make_entry,
    make_header,
    offer_key,
    replay_problems,
    shown,
    top_k_maps,
    top_k_rows,
)
from .names import golden_path
from .replay import GoldenBackend

if TYPE_CHECKING:
    from ..backends.base import GenerationParams
    from ..generation_cache import GenerationCache, ResolvedTarget
    from ..matrix import CheckSpec, LoadedMatrix, Settings
    from ..specs import Side
    from ..suites import Prompt, Suite


class CheckRun(Protocol):
    """What recording and replay read of a compare check's run (the comparison kind's, which
    imports this module: the run is described here, not imported)."""

    @property
    def check(self) -> CheckSpec: ...

    @property
    def index(self) -> int: ...

    @property
    def loaded(self) -> LoadedMatrix: ...

    @property
    def cache(self) -> GenerationCache: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def suite(self) -> Suite: ...

    @property
    def golden_payloads(self) -> dict[str, dict[str, Any]]:
        """By prompt id: what :func:`record_prompts` recorded of the prompt (memoised)."""
        ...

    @property
    def baseline(self) -> ResolvedTarget: ...

    def tests(self) -> list[Side]: ...

    def resolve(self, side: Side) -> ResolvedTarget: ...

    def prompt(self, prompt_id: str) -> Prompt: ...

    def params(self, prompt: Prompt) -> GenerationParams: ...


def golden_name(run: CheckRun) -> str | None:
    """The golden a compare check names as its baseline, if any."""
    side = run.check.baseline_side(run.index)
    return run.loaded.target(side.ref, side.loc).golden


def _recorded_side(run: CheckRun) -> Side:
    """The test side recorded into the golden; refused when another compare of the matrix
    would record another target into the same golden."""
    name = golden_name(run)
    (side,) = run.tests()
    label = run.loaded.target(side.ref, side.loc).label
    for i, check in enumerate(run.loaded.matrix.checks):
        base = check.baseline_side(i)
        if not check.spec.golden_baseline or run.loaded.target(base.ref, base.loc).golden != name:
            continue
        (other,) = check.test_sides(i)
        other_label = run.loaded.target(other.ref, other.loc).label
        if other_label != label:
            raise GoldenError(
                f"golden:{name} would be recorded from both {label} and {other_label} "
                f"(checks[{run.index}] and checks[{i}]): record each golden from one target"
            )
    return side


@dataclass(frozen=True)
class GoldenRecording:
    """The record of an item under ``--infercheck-record`` (role ``record``): what recording
    one prompt (a prompt item, or the aggregate of a one-prompt suite) is a
    :class:`PromptRecording`, recording several (the aggregate) a :class:`SuiteRecording`."""

    golden: str
    """The golden's name (``adder-v1`` of ``golden:adder-v1``)."""
    file: str
    """The golden file written at the end of the run (as shown: relative where it can be)."""
    target: str
    """The recorded target's label (the compare's test side, ``adder@local``)."""
    engines: dict[str, dict[str, Any]]
    """The recorded target's engine identity, by its label."""


@dataclass(frozen=True)
class PromptRecording(GoldenRecording):
    """What was recorded of one prompt (keys ``prompt_id`` ... ``positions``)."""

    prompt_id: str
    """The prompt's id in its suite."""
    text: str
    """The recorded output."""
    token_ids: list[int] | None
    """Its token ids (None when the backend does not return them)."""
    finish_reason: str
    """Why the generation stopped (``stop``, ``length``)."""
    positions: int
    """Positions with recorded top-k logprobs (0: text only)."""


@dataclass(frozen=True)
class SuiteRecording(GoldenRecording):
    """What the aggregate recorded: the whole suite (reusing what its prompt items recorded);
    the key ``prompts`` tells it from a :class:`PromptRecording`."""

    prompts: int
    """Prompts recorded into the golden."""


def record_prompts(run: CheckRun, prompt_ids: list[str]) -> tuple[GoldenRecording, list[Any]]:
    """Record ``prompt_ids`` of the run's suite: the item's record (one prompt: what was
    recorded; several: a summary) and the payloads for the golden writer."""
    name = golden_name(run)
    assert name is not None
    side = _recorded_side(run)
    test = run.resolve(side)
    path = golden_path(run.loaded, name, writing=True)
    payloads = [_record_one(run, side, test, run.prompt(pid)) for pid in prompt_ids]
    for payload in payloads:
        payload["file"] = str(path)
    common = GoldenRecording(
        golden=name,
        file=shown(path),
        target=test.label,
        engines={test.label: test.backend.identity()},
    )
    if len(payloads) != 1:
        return SuiteRecording(**vars(common), prompts=len(payloads)), payloads
    output = payloads[0]["entry"]["output"]  # the golden file's format (see .file)
    recording = PromptRecording(
        **vars(common),
        prompt_id=prompt_ids[0],
        text=output["text"],
        token_ids=output["token_ids"],
        finish_reason=output["finish_reason"],
        positions=len(output["top_logprobs"] or []),
    )
    return recording, payloads


def _record_one(run: CheckRun, side: Side, test: ResolvedTarget, prompt: Prompt) -> dict[str, Any]:
    """A copy of the payload of ``prompt``, recorded once per run (memoised on
    ``run.golden_payloads``: the aggregate reuses what the items recorded)."""
    if prompt.id in run.golden_payloads:
        return dict(run.golden_payloads[prompt.id])
    cache, settings = run.cache, run.settings
    thinking = settings.thinking
    params = run.params(prompt)
    conversation = cache.conversation(test, prompt, thinking, params)
    rendered = conversation.final
    generation = cache.generate(test, rendered, params)
    k = settings.golden_top_k
    top, keys = None, generation.top_keys
    caps = test.backend.capabilities
    if caps.teacher_forcing and rendered.token_ids and generation.token_ids:
        ids = generation.token_ids
        scores = cache.score(test, list(rendered.token_ids), ids)
        top, keys = top_k_rows(scores, k), "id"
        chosen = [float(scores[t, i]) for t, i in enumerate(ids)]
        generation = dataclasses.replace(generation, chosen_logprobs=chosen)
    elif caps.teacher_forcing_top_k and rendered.token_ids and generation.token_ids:
        ids = generation.token_ids
        rows = cache.score_top_k(test, list(rendered.token_ids), ids)
        top, keys = top_k_maps([r.top for r in rows], k), "id"
        generation = dataclasses.replace(generation, chosen_logprobs=[r.chosen for r in rows])
    elif generation.top_logprobs:
        top = top_k_maps(generation.top_logprobs, k)
    model = run.loaded.target(side.ref, side.loc).model
    spec = run.loaded.matrix.models[model].model_dump(exclude_none=True)
    payload = {
        "header": make_header(
            name=str(golden_name(run)),
            target=test.label,
            model={"name": model, **spec},
            engine=test.backend.identity(),
            tokenizer=test.backend.tokenizer_fingerprint(),
            top_k=k,
        ),
        "entry": make_entry(
            suite=run.suite.name,
            prompt_id=prompt.id,
            asked=(prompt.text, prompt.system, thinking),
            rendered=rendered,
            params=params,
            generation=generation,
            top=top,
            top_keys=keys,
            conversation=conversation,
            turn_top_k=k,
        ),
    }
    run.golden_payloads[prompt.id] = payload
    return dict(payload)


def verify_replay(run: CheckRun, test_ref: str, prompt_id: str) -> None:
    """Refuse a golden baseline recorded from another model name or tokenizer, or without
    the prompt: :class:`GoldenError` names the file and every difference."""
    baseline = run.baseline
    if not isinstance(baseline.backend, GoldenBackend):
        return
    side = next(s for s in run.tests() if s.ref == test_ref)
    prompt = run.prompt(prompt_id)
    golden = baseline.backend.golden
    test = run.resolve(side)
    model = run.loaded.target(side.ref, side.loc).model
    problems = replay_problems(golden, model, test.backend.tokenizer_fingerprint())
    offer = offer_key(prompt.tools, prompt.tool_choice)
    if not golden.asked(prompt.text, prompt.system, run.settings.thinking, prompt.messages, offer):
        what = (
            "" if prompt.messages is None else f", a conversation of {len(prompt.messages)} turns"
        )
        problems.append(
            f"no recording of prompt {prompt.id} ({prompt.text[:60]!r}{what}) of suite "
            f"{run.suite.name}: the suite or the settings changed since it was recorded"
        )
    if problems:
        raise GoldenError(
            f"{golden.where()} refused as the baseline of {test.label}: "
            + "; ".join(problems)
            + " (record it again with --infercheck-record if the change is intended)"
        )


def replay_lines(baseline: ResolvedTarget, tests: list[ResolvedTarget]) -> list[str]:
    """For a golden baseline: one line naming the recorded engine and the live ones."""
    if not isinstance(baseline.backend, GoldenBackend):
        return []
    golden = baseline.backend.golden
    recorded = engine_summary(golden.header.get("engine", {}))
    live = "; ".join(f"{t.label}: {engine_summary(t.backend.identity())}" for t in tests)
    return [
        f"{baseline.label} recorded from {golden.header.get('target')} on {recorded} "
        f"({shown(golden.path)}); now {live}"
    ]
