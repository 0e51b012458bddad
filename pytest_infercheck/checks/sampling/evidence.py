"""What the ``sampling`` gather facet returns for one item, and the pure analysis of it.

A position item (:class:`PositionEvidence`) holds the drawn tokens counted, the reference's
raw log-probabilities at the position (the full vocabulary, or a top-k list with the rest
pooled as ``tail``), the engine whose documented semantics turn them into the expected
distribution (:func:`~pytest_infercheck.metrics.sampling.expected_distribution`), the level
``alpha`` and the family size ``m``. Its measure ``fit`` is:

- ``Finding(False, ...)`` when a sampled token lies outside the truncated support (and is not
  a boundary token, whose inclusion is within the engines' numerical noise:
  :class:`~pytest_infercheck.metrics.sampling.Expected`), naming the token and the
  parameter(s) that exclude it;
- else the G-test (:func:`~pytest_infercheck.metrics.sampling.goodness_of_fit`, expected
  counts below 5 pooled) judged at the Bonferroni level: it fails when
  ``p_value < alpha / m``, naming the parameters, the statistic and the most over-sampled
  token;
- :class:`~pytest_infercheck.verdict.measure.Unmeasured` when nothing can be compared (no
  draws, no reference row, a non-finite logprob), so the gate fails naming why.

Where the engine reports the distribution it samples from (``processed``: llama-server's
``post_sampling_probs``), a reported probability more than :data:`PROCESSED_ATOL` from the
expected one fails the item too, naming the token (after the support check, before the
G-test).

A seed item (:class:`SeedEvidence`) holds the outputs of one seed repeated alone and at once,
and of distinct seeds; its measure ``seed`` fails when one seed gives two outputs, or when
every distinct seed gives the same output although the chance of that under the parameters
is below :data:`SEED_COINCIDENCE` (``p_max ** (k - 1)``, ``p_max`` the largest expected
probability of the first token, ``k`` the seeds).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from ...metrics.sampling import Expected, Fit, SamplingParams, expected_distribution, pooled
from ...metrics.sampling import goodness_of_fit as g_test
from ...verdict.conduct import Conduct
from ...verdict.measure import Finding, MeasureValue, Unmeasured
from .shift import bias_finding, penalized, shifted_row, without

PROCESSED_ATOL = 1e-4
"""The largest difference between a reported post-sampling probability and the expected one
taken as float32 noise (llama.cpp reports float32 probabilities; measured differences on the
tiny adder are below 1e-6)."""
SEED_COINCIDENCE = 1e-6
"""The largest chance of distinct seeds all giving one output under which their giving one
output is read as the seed being ignored."""

ENGINE_OF_KIND = {
    "mlx-lm": "mlx-lm",
    "llama-server": "llama-server",
    "vllm": "vllm",
    "vllm-mlx": "vllm-mlx",
    "sglang": "sglang",
    "openai": "openai",
    "ollama": "llama-server",
}
"""The semantics of the sampling parameters (:data:`~pytest_infercheck.metrics.sampling.
ENGINES`) each backend kind's engine follows (Ollama runs llama.cpp's sampler)."""

TRUNCATIONS = ("top_k", "top_p", "min_p")


def sampling_params(params: Mapping[str, Any]) -> SamplingParams:
    """The :class:`SamplingParams` of a parameter set as written."""
    return SamplingParams(
        temperature=float(params["temperature"]),
        top_k=params.get("top_k"),
        top_p=params.get("top_p"),
        min_p=params.get("min_p"),
    )


def said(params: Mapping[str, Any]) -> str:
    """``temperature 1, top_p 0.9``."""
    return ", ".join(
        f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}" for k, v in params.items()
    )


@dataclass(frozen=True)
class Analysis:
    """The expected distribution and the test of the counts against it."""

    expected: Expected
    fit: Fit
    row: dict[int, float]
    """The log-probabilities truncated and tempered: the reference's, shifted by the
    penalties and the bias where the set has them (:mod:`.shift`)."""


@dataclass
class PositionEvidence:
    """One prompt x parameter set x position (see the module docstring)."""

    prompt_id: str
    target: str
    params: dict[str, Any]
    """The parameter set as written (``{"temperature": 1.0, "top_p": 0.9}``)."""
    position: int
    context: list[int]
    """The greedy tokens teacher-forced before the position (empty at position 0)."""
    engine: str
    """Whose semantics the expected distribution follows (:data:`ENGINE_OF_KIND`)."""
    reference: str
    """The target whose raw logprobs the expectation is made of."""
    samples: int
    """Draws asked."""
    alpha: float
    family: int
    counts: dict[int, int] = field(default_factory=dict)
    logprobs: dict[int, float] | None = None
    """The reference's raw logprobs at the position (full vocabulary or top-k)."""
    tail: float = 0.0
    pieces: dict[int, str] = field(default_factory=dict)
    """Each sampled or expected token's text, for naming it."""
    why_not: str | None = None
    """Why nothing could be compared (no token ids, the greedy continuation ended, ...)."""
    processed: dict[int, float] | None = None
    """The distribution the engine reports it samples from (llama-server's
    ``post_sampling_probs``), where it reports one."""
    history: list[int] = field(default_factory=list)
    """The tokens so far the penalties count: the prompt's ids and :attr:`context`."""
    logits: dict[int, float] | None = None
    """The reference's raw logits at the position, where it gives them (the repetition
    penalty needs them: :mod:`.shift`)."""
    groups: list[tuple[int, ...]] = field(default_factory=list)
    """Tokens the draws cannot tell apart, each group counted as its first id (a server that
    returns the drawn text only, where several tokens have one text: the special tokens a
    server strips, the bytes of a broken character); the expected distribution pools each
    group the same way (:func:`~pytest_infercheck.metrics.sampling.pooled`)."""
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def level(self) -> float:
        """The Bonferroni level of this item: ``alpha / m``."""
        return self.alpha / max(self.family, 1)

    @cached_property
    def analysis(self) -> Analysis | Unmeasured:
        """The expected distribution and the G-test, or why there is none."""
        if self.why_not is not None:
            return Unmeasured(self.why_not)
        if self.logprobs is None:
            return Unmeasured(f"no reference logprobs at position {self.position}")
        drawn = sum(self.counts.values())
        if drawn == 0:
            return Unmeasured(f"no tokens were drawn at position {self.position}")
        try:
            row = self.shifted(self.params)
            expected = self.expect(row, self.params)
            fit = g_test(self.counts, expected, alpha=self.level, up_to=self.alpha)
        except ValueError as exc:
            return Unmeasured(f"the expected distribution cannot be made: {exc}")
        return Analysis(expected, fit, row)

    def expect(self, row: Mapping[int, float], params: Mapping[str, Any]) -> Expected:
        """The expected distribution of ``params`` over ``row`` by the engine's semantics,
        with the indistinguishable :attr:`groups` pooled."""
        e = expected_distribution(row, sampling_params(params), self.engine, tail=self.tail)
        return pooled(e, self.groups)

    def shifted(self, params: Mapping[str, Any]) -> dict[int, float]:
        """The reference's row shifted by the penalties and bias of ``params``
        (:func:`.shift.shifted_row`; unchanged without them)."""
        assert self.logprobs is not None
        return shifted_row(self.logprobs, self.logits, self.tail, params, self.engine, self.history)

    def dropped(self) -> str:
        """The parameters whose absence the draws fit (p at least the item's level against
        the expectation without it, where they fail the full one): each penalty and
        truncation left out, and a temperature other than 1 replaced by 1 (the OpenAI API's
        default, vLLM's and mlx-lm's): ``; the draws fit the distribution without
        presence_penalty (p 0.41): not applied?``, ``...without temperature 1.5 (at 1; p
        0.3)...``; empty when none does."""
        fits = []
        for name, params in self.alternatives():
            try:
                e = self.expect(self.shifted(params), params)
                p = g_test(self.counts, e, alpha=self.level, up_to=self.alpha)
            except ValueError:
                continue
            if not p.outside_support and p.p_value >= self.level:
                at = " (at 1; " if name.startswith("temperature") else " ("
                fits.append(f"{name}{at}p {p.p_value:.3g})")
        if not fits:
            return ""
        return f"; the draws fit the distribution without {' or '.join(fits)}: not applied?"

    def alternatives(self) -> list[tuple[str, dict[str, Any]]]:
        """The parameter sets of an engine that dropped one parameter of :attr:`params`, each
        with the parameter's name: a penalty or truncation left out, a temperature other
        than 1 at 1 (``temperature 1.5``)."""
        out = [(name, without(self.params, name)) for name in penalized(self.params)]
        out += [(name, without(self.params, name)) for name in TRUNCATIONS if name in self.params]
        t = float(self.params["temperature"])
        if t != 1.0:
            out.append((f"temperature {t:g}", {**self.params, "temperature": 1.0}))
        return out

    def name(self, token: int) -> str:
        piece = self.pieces.get(token)
        return f"{token}" if piece is None else f"{token} {piece!r}"

    def excluded_by(self, token: int, row: Mapping[int, float]) -> list[str]:
        """The truncations that alone exclude ``token`` (``top_p 0.9``) from ``row``."""
        out = []
        for name in TRUNCATIONS:
            if self.params.get(name) is None:
                continue
            alone = {"temperature": self.params["temperature"], name: self.params[name]}
            try:
                e = self.expect(row, alone)
            except ValueError:
                continue
            if token not in e.probs and token not in e.boundary:
                out.append(f"{name} {self.params[name]}")
        return out

    @property
    def fit(self) -> MeasureValue:
        """The measure the ``alpha`` gate reads (see the module docstring)."""
        a = self.analysis
        if isinstance(a, Unmeasured):
            return a
        head = f"{said(self.params)} at position {self.position}"
        drawn = sum(self.counts.values())
        if drawn < self.samples and not self.conduct.failures:
            return Finding(
                False,
                f"{head}: {self.samples} draws asked, {drawn} returned (the engine answered "
                "fewer choices than a request's n asked)",
            )
        broken = bias_finding(self.params, self.counts, a.expected, self.name)
        if broken:
            return Finding(False, f"{head}: {broken}")
        if a.fit.outside_support:
            parts = []
            for token in a.fit.outside_support[:5]:
                by = self.excluded_by(token, a.row)
                why = f"excluded by {' and '.join(by)}" if by else "excluded by the parameters"
                parts.append(f"token {self.name(token)} x{self.counts.get(token, 0)} ({why})")
            more = len(a.fit.outside_support) - 5
            tail = f", ... {more} more" if more > 0 else ""
            return Finding(False, f"{head}: sampled outside the support: {', '.join(parts)}{tail}")
        if self.processed is not None:
            off = self.processed_off(a.expected)
            if off:
                return Finding(
                    False,
                    f"{head}: the engine's post-sampling probabilities differ from the expected "
                    f"({self.engine} semantics): {off}{self.dropped()}",
                )
        if a.fit.p_value < self.level:
            return Finding(
                False,
                f"{head}: sampled distribution differs from the expected ({self.engine} "
                f"semantics): G {a.fit.statistic:.4g} on {a.fit.dof} dof, p {a.fit.p_value:.3g} "
                f"< alpha/m = {self.alpha:g}/{self.family}; {self.most_over(a)}{self.dropped()}",
            )
        return Finding(True)

    def processed_off(self, expected: Expected) -> str:
        """The tokens whose reported post-sampling probability is off the expected one by
        more than :data:`PROCESSED_ATOL` (boundary tokens left out), the worst first:
        ``token 57 '6' 0.0293 vs 0 expected``; empty when none is."""
        assert self.processed is not None
        off = []
        for token in {*self.processed, *expected.probs} - set(expected.boundary):
            got, want = self.processed.get(token, 0.0), expected.probs.get(token, 0.0)
            if abs(got - want) > PROCESSED_ATOL:
                off.append((abs(got - want), token, got, want))
        off.sort(reverse=True)
        shown = [f"token {self.name(t)} {g:.4g} vs {w:.4g} expected" for _, t, g, w in off[:3]]
        more = f", ... {len(off) - 3} more" if len(off) > 3 else ""
        return ", ".join(shown) + more

    def most_over(self, a: Analysis) -> str:
        """The token sampled most above its expected count: ``most over-sampled: token 56
        '5' 812 vs 640.0 expected``."""
        n = sum(self.counts.values())
        best: tuple[float, int] | None = None
        for token in {*self.counts, *a.expected.probs}:
            if token in a.expected.boundary:
                continue
            diff = self.counts.get(token, 0) - n * a.expected.probs.get(token, 0.0)
            if best is None or diff > best[0]:
                best = (diff, token)
        if best is None:
            return "no token over-sampled"
        token = best[1]
        exp = n * a.expected.probs.get(token, 0.0)
        drawn = self.counts.get(token, 0)
        return f"most over-sampled: token {self.name(token)} {drawn} vs {exp:.1f} expected"

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        """``fit``; ``seed`` is not this item's (True: the seed gate judges seed items)."""
        return {"fit": self.fit, "seed": True}


@dataclass
class SeedEvidence:
    """One prompt's seeded requests (see the module docstring)."""

    prompt_id: str
    target: str
    params: dict[str, Any]
    seed: int
    alone: list[list[int]] = field(default_factory=list)
    """Outputs (token ids) of ``seed``, one request after another."""
    together: list[list[int]] = field(default_factory=list)
    """Outputs of ``seed``, the requests at once."""
    seeds: dict[int, list[int]] = field(default_factory=dict)
    """The output of each distinct seed."""
    p_max: float | None = None
    """The largest expected probability of the first token under :attr:`params`."""
    why_not: str | None = None
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def coincidence(self) -> float | None:
        """``p_max ** (k - 1)``: a bound on the chance that ``k`` seeds all give one output."""
        if self.p_max is None or not self.seeds:
            return None
        return self.p_max ** (len(self.seeds) - 1)

    @property
    def seed_finding(self) -> MeasureValue:
        if self.why_not is not None:
            return Unmeasured(self.why_not)
        if not self.alone or not self.together or not self.seeds:
            return Unmeasured("no seeded output was returned")
        found = []
        alone = {tuple(o) for o in self.alone}
        if len(alone) > 1:
            found.append(
                f"seed {self.seed} gave {len(alone)} distinct outputs over {len(self.alone)} "
                "requests one after another"
            )
        together = {tuple(o) for o in self.together}
        if len(together | alone) > len(alone):
            found.append(
                f"seed {self.seed} gave {len(together | alone)} distinct outputs with "
                f"{len(self.together)} requests at once (alone: {len(alone)})"
            )
        distinct = {tuple(o) for o in self.seeds.values()}
        bound = self.coincidence
        if len(distinct) == 1 and len(self.seeds) > 1:
            if bound is None or not math.isfinite(bound):
                return Unmeasured("no expected first-token distribution to judge the seeds by")
            if bound > SEED_COINCIDENCE:
                return Unmeasured(
                    f"{len(self.seeds)} seeds all gave one output, which is likely under "
                    f"{said(self.params)} (chance up to {bound:.3g}): the prompt's first token "
                    "is too certain to tell an ignored seed"
                )
            found.append(
                f"{len(self.seeds)} distinct seeds all gave one output (chance at most "
                f"{bound:.2g} under {said(self.params)}): the seed is ignored"
            )
        if found:
            return Finding(False, "; ".join(found))
        return Finding(True)

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        """``seed``; ``fit`` is not this item's (True: the alpha gate judges positions)."""
        return {"seed": self.seed_finding, "fit": True}
