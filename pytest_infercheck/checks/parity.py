"""stream-parity and endpoint-parity: one server, the same request two ways, same answer.

**stream-parity**: each prompt generated with the backend's own request, once as usual and
once streamed (SSE; Ollama: NDJSON), assembled from its chunks. The two must be identical:
token ids where the server returns them (llama-server), else text; where both carry logprobs
and the tokens are identical, ``max |logprob_a - logprob_b|`` over the positions must stay
within ``logprob_tolerance``. A dropped, duplicated or reordered chunk fails the item.

**endpoint-parity**: each prompt's messages through each of ``endpoints``; the first is the
reference, every other one is an item ``<prompt>[<endpoint>]``. ``completions`` gets the text
of the chat template rendered once (llama-server: its ``/apply-template``; OpenAI-compatible
servers: the served model folder's own template, in-process), ``chat``
(``/v1/chat/completions``) and ``messages`` (Anthropic-style ``/v1/messages``) get the
messages and apply the same template on the server, so the three receive the same input.
Compared on text: similarity (difflib ratio) at least ``min_similarity`` (default 1.0: the
same text) and answers by the prompt's answer kind (``flips.fail_item_on``). Differences that
remain by design of the endpoints, and can show up as real divergences: the servers strip
special tokens from chat output but may keep them in completions text; BOS handling (a
completions prompt is tokenized with the server's add-BOS rule, while a template may spell
out the BOS; llama-server strips a leading BOS from its template output and adds it back);
a reasoning block returned apart by the chat endpoints; Anthropic ``max_tokens`` is
mandatory and ``stop_reason`` is mapped to ``stop``/``length``; no token ids or logprobs are
compared (the chat endpoints of these servers return none comparable).

Both need a server backend; an in-process (mlx-lm) target fails its items with that message.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..backends import BackendError, Generation, PromptInput
from ..metrics.answers import FlipKind, fails_item, judge_answers
from ..metrics.sameness import same_generation
from ..metrics.text import similarity
from ..render.markup import esc, mapping, table
from ..render.table import check_table
from ..render.text import mark_divergence, safe_text
from ..render.views import facts, flip_cell, side_by_side, target_aggregate, text_of
from ..specs import TARGET_THRESHOLDS, TargetCheck
from .protocol import (
    Aggregates,
    CheckKind,
    ItemPlan,
    Outcome,
    TargetRun,
    memoised,
    target_label,
)

if TYPE_CHECKING:
    from ..config import CheckSpec
    from ..suites import Prompt, Suite


Endpoint = Literal["completions", "chat", "messages"]


class StreamParitySpec(TargetCheck):
    """The same request streamed (SSE) and not streamed."""


class EndpointParitySpec(TargetCheck):
    """The same templated prompt through each endpoint; the first is the reference."""

    endpoints: list[Endpoint] = Field(
        default_factory=lambda: list[Endpoint](["completions", "chat"]), min_length=2
    )


@dataclass(frozen=True)
class SideComparison:
    """Two generations of one prompt compared (see :func:`compare_generations`)."""

    match: bool
    first_divergence: int | None
    divergence_unit: str | None
    similarity: float
    answers: list[str | None]
    flip: str | None
    logprob_drift: float | None


def compare_generations(prompt: Prompt, ref: Generation, other: Generation) -> SideComparison:
    """``match``, ``first_divergence`` and ``divergence_unit``: the sameness verdict
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`). ``logprob_drift``: max
    |difference| of the chosen tokens' logprobs when the outputs match and both have them
    (NaN positions skipped). ``flip``: :func:`~pytest_infercheck.metrics.answers.judge_answers`
    when the prompt has an answer kind."""
    verdict = same_generation(ref, other)
    match = verdict.same
    drift = None
    if match and ref.chosen_logprobs and other.chosen_logprobs:
        diffs = [
            abs(a - b)
            for a, b in zip(ref.chosen_logprobs, other.chosen_logprobs, strict=False)
            if math.isfinite(a) and math.isfinite(b)
        ]
        drift = max(diffs) if diffs else None
    answers: list[str | None] = [None, None]
    flip = None
    if prompt.answer_kind is not None:
        judged = judge_answers(prompt.answer_kind, prompt.answer, ref.text, other.text)
        answers = [a.raw if a else None for a in (judged.base, judged.test)]
        flip = judged.flip.value
    return SideComparison(
        match=match,
        first_divergence=verdict.first_divergence,
        divergence_unit=verdict.divergence_unit,
        similarity=similarity(ref.text, other.text),
        answers=answers,
        flip=flip,
        logprob_drift=drift,
    )


def side_data(label_key: str, label: str, generation: Generation) -> dict[str, Any]:
    """One side of an item's data: ``{"mode"|"endpoint": label, "text", "token_ids"}``."""
    data: dict[str, Any] = {
        label_key: label,
        "text": generation.text,
        "token_ids": generation.token_ids,
        "finish_reason": generation.finish_reason,
    }
    if "prompt_text" in generation.extra:
        data["prompt_text"] = generation.extra["prompt_text"]
    return data


@dataclass
class _ParityRun(TargetRun):
    """What the two parity kinds share: items are pairs of generations of one prompt. Each
    item's outcome is memoised on the run (shared by the suite's items and its aggregate)."""

    label_key = "mode"
    _outcomes: dict[str, Outcome] = field(default_factory=dict, init=False, repr=False)
    """By item name (``ItemPlan.full_name``: ``r017``, ``e01[chat]``): its outcome."""

    def _outcome(
        self, prompt: Prompt, labels: tuple[str, str], ref: Generation, other: Generation
    ) -> Outcome:
        result = compare_generations(prompt, ref, other)
        violations = self.violations(result, labels)
        data = {
            "prompt_id": prompt.id,
            "target": self.target.label,
            "reference": side_data(self.label_key, labels[0], ref),
            "other": side_data(self.label_key, labels[1], other),
            "match": result.match,
            "first_divergence": result.first_divergence,
            "divergence_unit": result.divergence_unit,
            "similarity": result.similarity,
            "answers": result.answers,
            "flip": result.flip,
            "logprob_drift": result.logprob_drift,
        }
        width = max(len(label) for label in labels)
        text = "\n".join(
            [
                f"prompt {prompt.id}: {safe_text(prompt.text)}",
                f"  {labels[0]:<{width}}: {mark_divergence(ref.text, other.text)}",
                f"  {labels[1]:<{width}}: {mark_divergence(other.text, ref.text)}",
                f"  first divergence: {result.first_divergence} ({result.divergence_unit}), "
                f"similarity {result.similarity:.4f}, answers {result.answers}",
            ]
        )
        properties: list[tuple[str, Any]] = [
            ("infercheck_match", result.match),
            ("infercheck_similarity", result.similarity),
            ("infercheck_first_divergence", str(result.first_divergence)),
            ("infercheck_flip", str(result.flip)),
        ]
        return Outcome(violations, text, data, properties)

    def violations(self, result: SideComparison, labels: tuple[str, str]) -> list[str]:
        raise NotImplementedError

    def _aggregate(self, outcomes: dict[str, Outcome | str], counts: dict[str, Any]) -> Outcome:
        """Counts over every item's outcome (a string is an item's error), failing when any
        item failed or errored."""
        failed = sorted(k for k, o in outcomes.items() if isinstance(o, str) or o.violations)
        errors = {k: o for k, o in outcomes.items() if isinstance(o, str)}
        done = [o for o in outcomes.values() if isinstance(o, Outcome)]
        n_match = sum(1 for o in done if o.data["match"])
        n_flips = sum(
            1 for o in done if o.data["flip"] is not None and FlipKind(o.data["flip"]).is_flip
        )
        target = self.target
        data: dict[str, Any] = {
            "target": target.label,
            "items": len(outcomes),
            "n_match": n_match,
            "n_mismatch": len(done) - n_match,
            "n_failed": len(failed),
            "n_flips": n_flips,
            "n_errors": len(errors),
            "errors": errors,
            "failed": failed,
            **counts,
            "engines": {target.label: target.backend.identity()},
        }
        violations = []
        if failed:
            violations.append(f"{len(failed)} of {len(outcomes)} items failed: {', '.join(failed)}")
        text = (
            f"{target.label}: {n_match}/{len(outcomes)} identical, {n_flips} answer flips, "
            f"{len(errors)} errors"
        )
        properties: list[tuple[str, Any]] = [
            ("infercheck_items", len(outcomes)),
            ("infercheck_match", n_match),
            ("infercheck_failed", len(failed)),
            ("infercheck_flips", n_flips),
            ("infercheck_errors", len(errors)),
        ]
        return Outcome(violations, text, data, properties)

    def _collect(self, plans: list[ItemPlan]) -> dict[str, Outcome | str]:
        """Each selected item's outcome (memoised), or its error message."""
        out: dict[str, Outcome | str] = {}
        for plan in plans:
            if self.selected and plan.key not in self.selected:
                continue
            name = plan.name if plan.param is None else f"{plan.name}[{plan.param}]"
            try:
                out[name] = self.run_item(plan)
            except BackendError as exc:
                out[name] = str(exc)
        return out


@dataclass
class StreamParityRun(_ParityRun):
    """Streamed vs not streamed, one item per prompt (see the module docstring)."""

    label_key = "mode"
    LABELS = ("non-streamed", "streamed")

    def run_item(self, plan: ItemPlan) -> Outcome:
        return memoised(self._outcomes, plan.full_name, lambda: self._run(plan.key))

    def _run(self, prompt_id: str) -> Outcome:
        target = self.served_target()
        prompt = self.prompt(prompt_id)
        rendered, params = self.render(prompt), self.params(prompt)
        ref = self.cache.generate(target, rendered, params)
        streamed = self.cache.call(target, target.backend.generate_stream(rendered, params))
        return self._outcome(prompt, self.LABELS, ref, streamed)

    def violations(self, result: SideComparison, labels: tuple[str, str]) -> list[str]:
        out = []
        if not result.match:
            out.append(
                f"the {labels[1]} output differs from the {labels[0]} one (first divergence "
                f"at {result.divergence_unit} {result.first_divergence})"
            )
        tolerance = self.check.logprob_tolerance
        if result.logprob_drift is not None and result.logprob_drift > tolerance:
            out.append(
                f"logprob drift {result.logprob_drift:.3g} with identical tokens > "
                f"logprob_tolerance {tolerance}"
            )
        return out

    def aggregate(self) -> Outcome:
        self.served_target()
        return self._aggregate(self._collect(self.plan(self.check, self.suite)), {})


@dataclass
class EndpointParityRun(_ParityRun):
    """Endpoints against the first one, one item per prompt and other endpoint."""

    label_key = "endpoint"
    _generations: dict[tuple[str, str], Generation] = field(
        default_factory=dict, init=False, repr=False
    )
    """By (prompt id, endpoint): the prompt through the endpoint (the reference endpoint's
    generation serves every item of the prompt)."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        endpoints = check.spec.endpoints
        return [
            ItemPlan(p.id, "prompt", p.id, param=endpoint)
            for p in suite.prompts
            for endpoint in endpoints[1:]
        ]

    @property
    def endpoints(self) -> list[str]:
        return list(self.check.spec.endpoints)

    def run_item(self, plan: ItemPlan) -> Outcome:
        endpoint = plan.param
        assert endpoint is not None
        return memoised(self._outcomes, plan.full_name, lambda: self._run(plan.key, endpoint))

    def _generate(self, prompt: Prompt, endpoint: str) -> Generation:
        """``prompt`` through ``endpoint`` (memoised: the reference serves every item)."""
        key = (prompt.id, endpoint)
        if key not in self._generations:
            target = self.served_target()
            messages = PromptInput(
                prompt.text,
                None,
                templated=True,
                system=prompt.system,
                thinking=self.settings.thinking,
            )
            self._generations[key] = self.cache.call(
                target, target.backend.generate_via(endpoint, messages, self.params(prompt))
            )
        return self._generations[key]

    def _run(self, prompt_id: str, endpoint: str) -> Outcome:
        prompt = self.prompt(prompt_id)
        reference = self.endpoints[0]
        ref = self._generate(prompt, reference)
        return self._outcome(prompt, (reference, endpoint), ref, self._generate(prompt, endpoint))

    def violations(self, result: SideComparison, labels: tuple[str, str]) -> list[str]:
        out = []
        minimum = 1.0 if self.check.min_similarity is None else self.check.min_similarity
        if result.similarity < minimum:
            out.append(
                f"{labels[1]} vs {labels[0]}: similarity {result.similarity:.4f} < "
                f"min_similarity {minimum} (first divergence at {result.divergence_unit} "
                f"{result.first_divergence})"
            )
        fail_on = self.check.flips.fail_item_on
        if fails_item(result.flip, fail_on):
            out.append(f"answer flip {result.flip} (fail_item_on: {fail_on})")
        return out

    def aggregate(self) -> Outcome:
        self.served_target()
        outcomes = self._collect(self.plan(self.check, self.suite))
        per_endpoint: dict[str, dict[str, int]] = {}
        for name, outcome in outcomes.items():
            endpoint = name.rpartition("[")[2].rstrip("]")
            row = per_endpoint.setdefault(endpoint, {"items": 0, "match": 0, "failed": 0})
            row["items"] += 1
            if isinstance(outcome, Outcome):
                row["match"] += int(bool(outcome.data["match"]))
                row["failed"] += int(bool(outcome.violations))
            else:
                row["failed"] += 1
        counts = {"reference": self.endpoints[0], "endpoints": per_endpoint}
        return self._aggregate(outcomes, counts)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per parity check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        endpoints = data.get("endpoints")
        detail = (
            ", ".join(f"{e} {r['match']}/{r['items']}" for e, r in endpoints.items())
            if endpoints
            else "streamed vs not"
        )
        counts = (f"{data['n_match']}/{data['items']}", str(data["n_flips"]))
        return [detail, *counts, str(data["n_errors"])]

    columns = (("compared", "<"), ("identical", ">"), ("flips", ">"), ("errors", ">"))
    return check_table(aggregates, columns, cells)


def parity_prompt(data: Mapping[str, Any]) -> str:
    """The two modes or endpoints side by side, their answers and whether they flipped."""
    ref, other = mapping(data.get("reference")), mapping(data.get("other"))

    def label(side: Mapping[str, Any], default: str) -> str:
        return str(side.get("mode") or side.get("endpoint") or default)

    answers = data.get("answers") or []
    parts = [
        facts(data, ("answers",)),
        side_by_side(
            label(ref, "reference"),
            text_of(ref.get("text")),
            label(other, "other"),
            text_of(other.get("text")),
            data.get("first_divergence"),
        ),
    ]
    if answers:
        cells = [esc(a) for a in list(answers)[:2]] + [flip_cell(data.get("flip"))]
        parts.append(table(["reference answer", "other answer", "flip"], [cells]))
    return "".join(parts)


STREAM_PARITY = CheckKind(
    name="stream-parity",
    spec=StreamParitySpec,
    run=StreamParityRun,
    label=target_label,
    thresholds=TARGET_THRESHOLDS,
    family="stream-parity",
    summary_lines=summary_lines,
    views={"prompt": parity_prompt, "aggregate": target_aggregate},
)
ENDPOINT_PARITY = dataclasses.replace(
    STREAM_PARITY,
    name="endpoint-parity",
    spec=EndpointParitySpec,
    run=EndpointParityRun,
    family="endpoint-parity",
)
