"""The work of one check x suite: per-prompt comparisons, the sweep self-check, aggregates.

Results are memoised on the engine, so the aggregate item reuses what the prompt items
computed (and computes what ``-k`` or another worker left out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .checks.aggregate import (
    SuiteAggregate,
    aggregate,
    aggregate_violations,
    degradation_cliff,
    format_aggregate,
)
from .checks.comparison import PromptComparison, compare_prompt
from .checks.verdicts import item_violations
from .config import Side
from .engine import ResolvedTarget
from .golden_runs import golden_name, record_prompts, replay_lines, verify_replay
from .metrics.text import first_divergence
from .suite_run import SuiteRun


@dataclass
class CheckRun(SuiteRun):
    """The comparisons of one compare/sweep/diff check x suite."""

    # -- targets ----------------------------------------------------------------------------
    @property
    def baseline(self) -> ResolvedTarget:
        return self.resolve(self.check.baseline_side(self.index))

    def tests(self) -> list[Side]:
        """The test sides in the user's order: one for compare, the sweep's models, the diff's
        other backends."""
        return self.check.test_sides(self.index)

    # -- per prompt ------------------------------------------------------------------------------
    def prefetch(self, side: Side) -> None:
        """Generate the selected prompts of the suite on both sides at once, where a side is
        a concurrent (HTTP) backend; an in-process engine generates item by item."""
        key = ("prefetched", self.loaded.path, self.index, self.suite.name, side.ref)
        if key in self.engine.memo:
            return
        self.engine.memo[key] = True
        prompts = [p for p in self.suite.prompts if p.id in self.selected] or self.suite.prompts
        baseline, test = self.baseline, self.resolve(side)
        if baseline.backend.concurrency <= 1 and test.backend.concurrency <= 1:
            return
        thinking = self.settings.thinking
        base_jobs, test_jobs = [], []
        for prompt in prompts:
            rendered = self.engine.render(baseline, prompt, thinking)
            shared = self.engine.accepts_ids(test, rendered)
            test_input = rendered if shared else self.engine.render(test, prompt, thinking)
            base_jobs.append((rendered, self.params(prompt)))
            test_jobs.append((test_input, self.params(prompt)))
        self.engine.prefetch(baseline, base_jobs)
        self.engine.prefetch(test, test_jobs)

    def prompt_result(self, prompt_id: str, test_ref: str) -> tuple[PromptComparison, list[str]]:
        """The comparison of one prompt (memoised) and the per-item thresholds it breaks."""
        key = ("comparison", self.loaded.path, self.index, self.suite.name, prompt_id, test_ref)
        result = self.engine.memo.get(key)
        if result is None:
            verify_replay(self, test_ref, prompt_id)
            self.prefetch(next(s for s in self.tests() if s.ref == test_ref))
            prompt = self.prompt(prompt_id)
            side = next(s for s in self.tests() if s.ref == test_ref)
            result = compare_prompt(
                self.engine,
                self.baseline,
                self.resolve(side),
                prompt,
                self.params(prompt),
                thinking=self.settings.thinking,
            )
            self.engine.memo[key] = result
        return result, item_violations(result, self.check)

    # -- golden recording (--infercheck-record) ----------------------------------------------
    @property
    def recording(self) -> bool:
        """Under ``--infercheck-record`` a compare against a golden records its test side."""
        return self.settings.record and golden_name(self) is not None

    def record(self, prompt_ids: list[str]) -> tuple[dict[str, Any], list[Any]]:
        """Record ``prompt_ids`` into the golden: report data and writer payloads."""
        return record_prompts(self, prompt_ids)

    def item_properties(self, result: PromptComparison) -> list[tuple[str, Any]]:
        """Scalar numbers for JUnit properties and the report; plain types only."""
        return [
            ("infercheck_method", result.method),
            ("infercheck_kl_mean", result.kl_mean),
            ("infercheck_kl_max", result.kl_max),
            ("infercheck_same_top_rate", result.same_top_rate),
            ("infercheck_first_divergence", result.first_divergence),
            ("infercheck_similarity", round(result.similarity, 6)),
            ("infercheck_severity", result.severity),
            ("infercheck_flip", result.flip),
            ("infercheck_base_reasoning_chars", result.base_reasoning_chars),
            ("infercheck_test_reasoning_chars", result.test_reasoning_chars),
        ]

    def item_data(self, result: PromptComparison) -> dict[str, Any]:
        """Everything measured for one prompt, for the reports and the JSON results."""
        data = result.to_dict()
        data.update(
            kl_mean=result.kl_mean,
            kl_max=result.kl_max,
            same_top_rate=result.same_top_rate,
            is_flip=result.is_flip,
        )
        return data

    # -- suite level -------------------------------------------------------------------------------
    def aggregate(self) -> tuple[str, list[str], list[tuple[str, Any]], dict[str, Any]]:
        """Summary text, suite-gate violations, JUnit properties and report data."""
        texts: list[str] = []
        violations: list[str] = []
        aggregates: list[SuiteAggregate] = []
        prompts = self.scope_prompts()
        for side in self.tests():
            results = [self.prompt_result(p.id, side.ref)[0] for p in prompts]
            agg = aggregate(results, self.check)
            aggregates.append(agg)
            texts.append(format_aggregate(agg))
            violations.extend(f"{agg.test}: {v}" for v in aggregate_violations(agg, self.check))
        texts.extend(replay_lines(self.baseline, list(map(self.resolve, self.tests()))))
        engines = {
            t.label: t.backend.identity() for t in [self.baseline, *map(self.resolve, self.tests())]
        }
        data: dict[str, Any] = {
            "check": self.check.kind,
            "suite": self.suite.name,
            "levels": [a.to_dict() for a in aggregates],
            "engines": engines,
        }
        properties = aggregate_properties(aggregates)
        properties.append(("infercheck_engines", json.dumps(engines, sort_keys=True)))
        if self.check.sweep is not None:
            cliff = degradation_cliff(
                [("self-check", 0.0, 0.0)]
                + [(a.test, a.failure_rate, a.flip_rate or 0.0) for a in aggregates]
            )
            data["cliff"] = cliff or "none"
            texts.append(f"degradation cliff: {cliff or 'none'}")
            properties.append(("infercheck_cliff", cliff or "none"))
        return "\n\n".join(texts), violations, properties, data

    def self_check(self) -> list[str]:
        """Differences between two independent baseline generations of every prompt."""
        baseline = self.baseline
        problems: list[str] = []
        for prompt in self.suite.prompts:
            rendered = self.engine.render(baseline, prompt, self.settings.thinking)
            params = self.params(prompt)
            first = self.engine.generate(baseline, rendered, params, run=0)
            second = self.engine.generate(baseline, rendered, params, run=1)
            if first.token_ids is not None and first.token_ids != second.token_ids:
                at = first_divergence(first.token_ids, second.token_ids or [])
                problems.append(f"{prompt.id}: token ids differ from index {at}")
            elif first.text != second.text:
                problems.append(f"{prompt.id}: output text differs")
            elif first.chosen_logprobs != second.chosen_logprobs:
                drift = max(
                    abs(a - b)
                    for a, b in zip(
                        first.chosen_logprobs or [], second.chosen_logprobs or [], strict=False
                    )
                )
                problems.append(f"{prompt.id}: same tokens, logprobs drift by {drift:.3g}")
        return problems


AGGREGATE_PROPERTIES = (
    "n_prompts",
    "n_failed",
    "kl_mean",
    "kl_se",
    "kl_p99",
    "kl_max",
    "same_top_rate",
    "n_flips",
    "flip_rate",
    "flip_rate_low",
    "flip_rate_high",
    "mcnemar_p",
)


def aggregate_properties(aggregates: list[SuiteAggregate]) -> list[tuple[str, Any]]:
    """Scalar JUnit properties of a suite's aggregates: ``infercheck_kl_mean`` and so on; with
    several test sides (a sweep) each name carries the side: ``infercheck_q4@local_kl_mean``."""
    properties: list[tuple[str, Any]] = []
    for agg in aggregates:
        prefix = "infercheck_" if len(aggregates) == 1 else f"infercheck_{agg.test}_"
        values = agg.to_dict()
        properties.extend((prefix + name, values[name]) for name in AGGREGATE_PROPERTIES)
    return properties
