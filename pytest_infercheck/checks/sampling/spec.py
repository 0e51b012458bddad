"""The ``sampling`` kind's YAML, items and gate: does the engine sample the distribution
its parameters define?

```yaml
- sampling: {target: adder@llama, samples: 2000}
  params:
    - {temperature: 0.8}
    - {temperature: 1.0, top_p: 0.9}
  positions: 3
  seed: true
  alpha: 0.001
```

Items (one per prompt x parameter set x position, named ``<prompt>[<params>-pos<j>]``,
plus ``<prompt>[seed]`` per prompt under ``seed: true``): at position ``j`` (0: the first
generated token; ``j > 0``: teacher-forced after the first ``j`` tokens of the target's
greedy continuation) ``samples`` next tokens are drawn with the parameters under test and
compared with the distribution the engine's documented semantics make of the reference's raw
(temperature-1) log-probabilities at that position (:mod:`.evidence`), shifted first by the
set's penalties and ``logit_bias`` given the tokens so far (:mod:`.shift`).

The one gate, ``alpha`` (default 0.001, always written), reads the item's ``fit``: a sample
outside the truncated support fails at once, naming the token; otherwise the G-test's
p-value must be at least ``alpha / m`` (Bonferroni over the ``m`` statistical items of the
check x suite, the first step of Holm's procedure, so an item is judged alone); the
aggregate applies Holm's step-down over all of them and fails for every item it rejects
(:mod:`.summarize`). A seed item reads ``seed``: the same seed gives the same output over
repeats alone and under concurrency, and several seeds do not all give one output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field, field_validator

from ...request_params import RequestParams, refused_params
from ...specs import KindThresholds, Loc, Side, TargetCheck
from ...verdict.gate import Gate
from ..framework.harness import NO_COLD_REFERENCE, RENDERED_ONCE, Blind, HarnessProfile
from ..framework.plan import ItemPlan
from ..framework.target import no_logprobs_reason

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Suite

SAMPLING_PARAMS = (
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
)
"""The parameters whose sampled distribution the kind checks (the penalties and the bias
shift the reference's row first: :mod:`.shift`)."""


class SamplingSpec(TargetCheck):
    """``samples`` next tokens drawn per item; ``reference``: the target whose raw
    logprobs the expected distribution is made of (default the target itself; it must
    share the target's tokenizer)."""

    samples: int = Field(default=2000, ge=20)
    """Next tokens drawn per item (at least 20, default 2000)."""
    reference: str | None = None
    """The model@backend whose raw logprobs make the expected distribution (default: the target
    itself; it must share the target's tokenizer)."""
    per_request: int | None = Field(default=None, ge=1)
    """Draws asked per request (``n``; default: llama-server's slots, 50 where the kind takes
    ``n``, else 1); 1 for a server that ignores ``n`` (mlx_lm.server 0.32.2 answers one
    choice, which fails the item otherwise)."""
    seed_runs: int = Field(default=4, ge=2)
    """Under ``seed: true``: requests with one seed, alone one after another and then at
    once (each count), and distinct seeds tried."""

    def test_sides(self, loc: Loc) -> list[Side]:
        if self.reference is None:
            return []
        return [Side("reference", self.reference, (*loc, "reference"))]


class SamplingThresholds(KindThresholds):
    """``params``: the parameter sets under test (each a sampled one: ``temperature`` > 0;
    ``top_k``, ``top_p``, ``min_p``, ``presence_penalty``, ``frequency_penalty``,
    ``repetition_penalty``, ``logit_bias`` (token id -> bias) besides; default one,
    ``{temperature: 1.0}``).
    ``positions``: the first generated position and ``positions - 1`` teacher-forced ones
    along the greedy continuation. ``seed``: add a seed item per prompt. ``alpha``: the
    family-wise level of the goodness-of-fit tests over the check x suite (Holm; Bonferroni
    per item)."""

    params: list[RequestParams] = Field(
        default_factory=lambda: [RequestParams(temperature=1.0)], min_length=1
    )
    """The parameter sets under test, each sampled (temperature > 0; top_k, top_p, min_p
    besides); default one, {temperature: 1.0}."""
    positions: int = Field(default=3, ge=1, le=16)
    """The first generated position and positions - 1 teacher-forced ones along the greedy
    continuation (1 to 16, default 3)."""
    seed: bool = False
    """Add a seed item per prompt (default false)."""
    alpha: float = Field(default=0.001, gt=0, lt=1)
    """The family-wise level of the goodness-of-fit tests over the check x suite (Holm;
    Bonferroni per item; default 0.001)."""

    @field_validator("params")
    @classmethod
    def _sampled(cls, value: list[RequestParams]) -> list[RequestParams]:
        for n, params in enumerate(value):
            if not params.temperature:
                raise ValueError(f"params[{n}]: temperature > 0 is required (0 is greedy)")
            other = [k for k in params.written() if k not in SAMPLING_PARAMS]
            if other:
                raise ValueError(
                    f"params[{n}]: {', '.join(other)} not checked by sampling (it checks "
                    f"{', '.join(SAMPLING_PARAMS)})"
                )
        labels = [p.label() for p in value]
        twice = sorted({x for x in labels if labels.count(x) > 1})
        if twice:
            raise ValueError(f"a parameter set is listed twice: {', '.join(twice)}")
        return value


GATES = (
    Gate("alpha", "fit", "true", "sampling"),
    Gate("seed", "seed", "true", "seeded sampling", written=lambda t: bool(t.seed)),
)


def position_param(label: str, position: int) -> str:
    """The bracketed part of a statistical item's name: ``t1-p0.9-pos0``."""
    return f"{label}-pos{position}"


def plan(check: CheckSpec, suite: Suite) -> list[ItemPlan]:
    """Per prompt: each parameter set at each position, then its seed item."""
    t: SamplingThresholds = check.kind_thresholds()  # type: ignore[assignment]
    out: list[ItemPlan] = []
    for prompt in suite.prompts:
        for params in t.params:
            for j in range(t.positions):
                param = position_param(params.label(), j)
                out.append(ItemPlan(prompt.id, "position", prompt.id, param=param))
        if t.seed:
            out.append(ItemPlan(prompt.id, "seed", prompt.id, param="seed"))
    return out


def family_size(thresholds: SamplingThresholds, prompts: int) -> int:
    """``m``: the statistical items of a check x suite (the Bonferroni divisor)."""
    return prompts * len(thresholds.params) * thresholds.positions


def refuse(loaded: LoadedMatrix, check: CheckSpec, index: int) -> list[tuple[Loc, str]]:
    """Each parameter of ``params`` (and the seed) the target's engine does not take, at
    its line (:func:`~pytest_infercheck.request_params.refused_params`)."""
    t: SamplingThresholds = check.kind_thresholds()  # type: ignore[assignment]
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    asked: list[tuple[Loc, list[str]]] = [
        (("checks", index, "params", n), p.written()) for n, p in enumerate(t.params)
    ]
    if t.seed:
        asked.append((("checks", index), ["seed"]))
    return refused_params(loaded, target, asked)


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> dict[str, str]:
    """``alpha`` on a target known from the matrix to return no logprobs, with no other
    ``reference``: no expected distribution can be made (a collection error at its line)."""
    if check.spec.reference is not None:
        return {}
    reason = no_logprobs_reason(loaded, check, index)
    if reason is None:
        return {}
    return {"alpha": f"not measured on any item: {reason} (name a reference: that does)"}


HARNESS = HarnessProfile(
    {
        "sampling": {"target": "{target}", "samples": 200},
        "params": [{"temperature": 5.0}, {"temperature": 5.0, "top_k": 3}],
        "positions": 1,
        "seed": True,
    },
    blind=(
        *RENDERED_ONCE,
        NO_COLD_REFERENCE,
        *(
            Blind(
                "a draw is one token counted: its logprobs are not read (the expected "
                "distribution comes from the teacher-forced rows)",
                fault=fault,
                path="generate",
            )
            for fault in ("nan", "inf", "no-logprobs")
        ),
        *(
            Blind(
                "one draw changed among the samples is within the sampling noise unless it "
                "falls outside the support",
                fault=fault,
                path="generate",
                every=False,
            )
            for fault in ("changed-token", "duplicated")
        ),
        Blind(
            "a draw reads the first token only, and the seed outputs are compared with each "
            "other: every output cut after its first token leaves both unchanged",
            fault="truncated",
            path="generate",
            every=True,
        ),
        Blind(
            "every draw answered with the engine's previous answer to the same prompt is a "
            "draw of the same distribution",
            fault="duplicated",
            path="generate",
            every=True,
        ),
    ),
)
"""The verdict harness's check (``tests/harness``): temperature 5 spreads the toy's rows (its
top token's 0.97 at temperature 1 becomes about 0.05, so distinct seeds differ); one
position, because the toy's rows depend on where its prompt ends (a prompt extended by a
token is not the same sequence to it as the prompt with that token generated)."""
