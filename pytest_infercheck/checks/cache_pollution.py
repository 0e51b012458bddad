"""cache-pollution: one bad request must not change anyone else's answers.

The suite's prompts are generated once, one at a time, as the reference ("before"). Each
item then sends one hostile request (see :mod:`..backends.hostile`: context overflow,
invalid UTF-8, special tokens in the prompt, ``max_tokens: 0``, a client that disconnects
mid-stream), checks that the server is alive (its health endpoint), and generates the
reference prompts again, one at a time. What the server answered to the hostile request
(4xx, 5xx, a closed connection, a completion) is recorded, not judged; an item fails when
the server is dead afterwards or any reference output changed: token ids where the server
returns them, else text. Items run in order, so later items also see earlier hostile
requests. This is the class of bug where one request corrupts a shared KV or prompt cache,
a slot or a batch for every request after it.

Needs a server backend; an in-process (mlx-lm) target fails its items with that message.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..backends import BackendError, Generation
from ..metrics.sameness import same_generation
from ..render.table import check_table
from ..render.text import mark_divergence
from ..render.views import facts, side_by_side, target_aggregate, text_of
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
    from ..suites import Suite


HostileKind = Literal[
    "context-overflow", "invalid-utf8", "special-tokens", "max-tokens-0", "disconnect"
]
HOSTILE_KINDS: tuple[HostileKind, ...] = (
    "context-overflow",
    "invalid-utf8",
    "special-tokens",
    "max-tokens-0",
    "disconnect",
)


class CachePollutionSpec(TargetCheck):
    """Reference prompts, then each hostile request, then the reference prompts again."""

    hostile: list[HostileKind] = Field(default_factory=lambda: list(HOSTILE_KINDS), min_length=1)


def changed_outputs(
    before: list[tuple[str, Generation]], after: list[tuple[str, Generation]]
) -> list[dict[str, Any]]:
    """``{"prompt_id", "before", "after", "first_divergence", "divergence_unit"}`` for each
    prompt whose output is not the same
    (:func:`~pytest_infercheck.metrics.sameness.same_generation`: ids and text)."""
    changed = []
    for (prompt_id, old), (_, new) in zip(before, after, strict=True):
        verdict = same_generation(old, new)
        if not verdict.same:
            changed.append(
                {
                    "prompt_id": prompt_id,
                    "before": old.text,
                    "after": new.text,
                    "first_divergence": verdict.first_divergence,
                    "divergence_unit": verdict.divergence_unit,
                }
            )
    return changed


@dataclass
class CachePollutionRun(TargetRun):
    """One item per hostile kind, then the aggregate (see the module docstring). The reference
    outputs and each hostile kind's outcome are memoised on the run (shared by the suite's
    items and its aggregate): each hostile request is sent once."""

    _before: list[tuple[str, Generation]] | None = field(default=None, init=False, repr=False)
    """The reference outputs before any hostile request: (prompt id, output), in suite order."""
    _hostile_outcomes: dict[str, Outcome] = field(default_factory=dict, init=False, repr=False)
    """By hostile kind: its item's outcome."""

    @classmethod
    def plan(cls, check: CheckSpec, suite: Suite) -> list[ItemPlan]:
        return [ItemPlan(kind, "hostile", kind) for kind in check.spec.hostile]

    def _references(self) -> list[tuple[str, Generation]]:
        """The suite's prompts generated now, sequentially, bypassing every cache."""
        target = self.served_target()
        out = []
        for prompt in self.suite.prompts:
            rendered, params = self.render(prompt), self.params(prompt)
            out.append(
                (prompt.id, self.cache.call(target, target.backend.generate(rendered, params)))
            )
        return out

    def before(self) -> list[tuple[str, Generation]]:
        """The reference outputs before any hostile request (computed once)."""
        if self._before is None:
            self._before = self._references()
        return self._before

    def run_item(self, plan: ItemPlan) -> Outcome:
        return memoised(self._hostile_outcomes, plan.key, lambda: self._hostile(plan.key))

    def _hostile(self, kind: str) -> Outcome:
        target = self.served_target()
        before = self.before()
        response = self.cache.run(target.backend.send_hostile(kind))
        alive = self.cache.run(target.backend.alive())
        violations: list[str] = []
        changed: list[dict[str, Any]] = []
        if not alive:
            violations.append(f"the server is not alive after the {kind} request")
        else:
            try:
                changed = changed_outputs(before, self._references())
            except BackendError as exc:
                violations.append(f"the reference prompts failed after the {kind} request: {exc}")
        if changed:
            violations.append(
                f"{len(changed)} of {len(before)} reference outputs changed after the {kind} "
                f"request: {', '.join(c['prompt_id'] for c in changed)}"
            )
        lines = [f"hostile request {kind}: {response}", f"server alive: {alive}"]
        lines += [
            f"  {c['prompt_id']}: before {mark_divergence(c['before'], c['after'])}"
            f" | after {mark_divergence(c['after'], c['before'])}"
            for c in changed
        ]
        data = {
            "target": target.label,
            "hostile": kind,
            "response": response,
            "alive": alive,
            "changed": changed,
            "prompts": len(before),
        }
        properties: list[tuple[str, Any]] = [
            ("infercheck_alive", alive),
            ("infercheck_changed", len(changed)),
            ("infercheck_prompts", len(before)),
        ]
        return Outcome(violations, "\n".join(lines), data, properties)

    def aggregate(self) -> Outcome:
        target = self.served_target()
        outcomes: dict[str, Outcome] = {}
        for plan in self.plan(self.check, self.suite):
            if not self.selected or plan.key in self.selected:
                outcomes[plan.key] = self.run_item(plan)
        dead = [k for k, o in outcomes.items() if not o.data["alive"]]
        polluted = [k for k, o in outcomes.items() if o.data["changed"]]
        failed = [k for k, o in outcomes.items() if o.violations]
        data: dict[str, Any] = {
            "target": target.label,
            "n_hostile": len(outcomes),
            "n_dead": len(dead),
            "n_polluted": len(polluted),
            "n_failed": len(failed),
            "prompts": len(self.suite.prompts),
            "responses": {k: o.data["response"] for k, o in outcomes.items()},
            "engines": {target.label: target.backend.identity()},
        }
        violations = []
        if dead:
            violations.append(f"the server died after: {', '.join(dead)}")
        if polluted:
            violations.append(f"reference outputs changed after: {', '.join(polluted)}")
        other = [k for k in failed if k not in dead and k not in polluted]
        if other:
            violations.append(f"reference prompts failed after: {', '.join(other)}")
        text = "\n".join(f"  {k}: {o.data['response']}" for k, o in outcomes.items())
        properties: list[tuple[str, Any]] = [
            ("infercheck_hostile", len(outcomes)),
            ("infercheck_dead", len(dead)),
            ("infercheck_polluted", len(polluted)),
        ]
        return Outcome(violations, f"{target.label}: hostile requests\n{text}", data, properties)


def summary_lines(aggregates: Aggregates) -> list[str]:
    """One row per cache-pollution check x suite for the terminal summary."""

    def cells(data: dict[str, Any]) -> list[str]:
        keys = ("n_hostile", "prompts", "n_dead", "n_polluted")
        return [str(data[k]) for k in keys]

    columns = (("hostile", ">"), ("prompts", ">"), ("died", ">"), ("changed", ">"))
    return check_table(aggregates, columns, cells)


def cache_pollution_hostile(data: Mapping[str, Any]) -> str:
    """The hostile request's fate and every prompt whose output changed after it."""
    parts = [facts(data, ())]
    for c in (data.get("changed") or [])[:20]:
        if isinstance(c, Mapping):
            parts.append(
                side_by_side(
                    f"before ({c.get('prompt_id', '?')})",
                    text_of(c.get("before")),
                    "after the hostile request",
                    text_of(c.get("after")),
                    c.get("first_divergence"),
                )
            )
    return "".join(parts)


CACHE_POLLUTION = CheckKind(
    name="cache-pollution",
    spec=CachePollutionSpec,
    run=CachePollutionRun,
    label=target_label,
    thresholds=TARGET_THRESHOLDS,
    family="cache-pollution",
    summary_lines=summary_lines,
    views={"hostile": cache_pollution_hostile, "aggregate": target_aggregate},
)
