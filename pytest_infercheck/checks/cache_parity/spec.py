"""cache-parity's spec facet: its YAML options, its thresholds and the gates they write.

Options (under ``cache-parity:``): ``target``, ``scenarios`` (which of :data:`SCENARIOS`),
``eviction_tokens`` (the cache's capacity in tokens, for ``eviction``) and
``max_eviction_prompts``.

Thresholds (beside the kind key), each a :class:`~pytest_infercheck.verdict.gate.Gate` or a
rule of the judge:

- ``logprob_tolerance`` (gate ``max``): ``max_s max_t |lp_ref[t] - lp_s[t]|`` over the
  compared scenarios ``s`` and the positions ``t`` where their tokens agree with the
  reference's (measure ``max_logprob_diff``). Written in the check entry, it fails an item
  whose scenarios returned no logprobs ("not measured"); left at its default (1e-4) it
  judges the items that have logprobs and says of the others that their logprobs were not
  compared (:mod:`.judge`);
- ``require_hits`` (gate ``true``): every compared scenario that expects a cache hit (all but
  ``eviction``) got one (measure ``cache_hits``); an engine that reports no cached tokens
  leaves it unmeasured, which fails;
- ``tie_margin``/``fail_on``: how a first divergence is labelled; ``fail_on: decisive`` is a
  waiver that cache-parity never applies (nothing after a divergence is judged: see
  :mod:`.judge`), and the item says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import Field

from ...specs import LogprobTolerance, TargetCheck, TieGates
from ...verdict.gate import Gate
from ..framework.harness import Blind, HarnessProfile

if TYPE_CHECKING:
    from ...matrix import CheckSpec, LoadedMatrix

Scenario = Literal["shared-prefix", "exact-repeat", "multi-turn", "eviction", "concurrent"]
SCENARIOS: tuple[Scenario, ...] = get_args(Scenario)
"""Every scenario, in the order they run on a prompt (each leaves the cache state the next
one starts from)."""
EXPECTS_HIT: frozenset[str] = frozenset(SCENARIOS) - {"eviction"}
"""The scenarios that are meant to be served from the cache."""


class CacheParitySpec(TargetCheck):
    """Each prompt's cold reference against its generations through the cache."""

    scenarios: list[Scenario] = Field(default_factory=lambda: list(SCENARIOS), min_length=1)
    """The cache scenarios run on each prompt, in order (default: all of them)."""
    eviction_tokens: int | None = Field(default=None, ge=0)
    """The cache's capacity in tokens (e.g. a llama-server ``-np 1 -c N --cache-ram 0``:
    ``N``); None: asked from the backend (vLLM), else ``eviction`` is not exercised."""
    max_eviction_prompts: int = Field(default=32, ge=1)
    """The most distinct prompts sent to push a prefix out."""


class CacheParityThresholds(LogprobTolerance, TieGates):
    """``logprob_tolerance`` where a scenario's tokens agree with the reference;
    ``tie_margin``/``fail_on`` (:class:`~pytest_infercheck.specs.TieGates`); ``require_hits``:
    a scenario that expects a cache hit and got none fails its item (default: shown only)."""

    require_hits: bool = False
    """A scenario that expects a cache hit and got none fails its item (default: shown only)."""


def tolerance_written(thresholds: Any) -> bool:
    """Whether the check entry writes ``logprob_tolerance`` itself (not its default)."""
    return "logprob_tolerance" in getattr(thresholds, "model_fields_set", ())


LOGPROB_GATE = Gate(
    "logprob_tolerance",
    reads="max_logprob_diff",
    op="max",
    what="logprob difference from the reference where the tokens agree",
    written=tolerance_written,
)
"""``logprob_tolerance`` as the check entry writes it (unmeasured: fails)."""
DEFAULT_LOGPROB_GATE = Gate(
    "logprob_tolerance",
    reads="max_logprob_diff",
    op="max",
    what="logprob difference from the reference where the tokens agree",
    written=lambda thresholds: True,
)
"""``logprob_tolerance`` at its default: the judge applies it to measured differences only
(a default nobody wrote does not fail an engine that returns no logprobs)."""
HITS_GATE = Gate(
    "require_hits",
    reads="cache_hits",
    op="true",
    what="a cache hit on every compared scenario that expects one",
    written=lambda thresholds: bool(getattr(thresholds, "require_hits", False)),
)

GATES: tuple[Gate, ...] = (LOGPROB_GATE, HITS_GATE)
"""The gates the framework judges on each item's measures (:mod:`.evidence`)."""


def unmeasurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> Mapping[str, str]:
    """The gates the matrix alone shows can never be measured (written, a collection error at
    their line): ``logprob_tolerance`` on a backend that returns no logprobs (``logprobs:
    false``, vllm-mlx), ``require_hits`` on one that reports no cached tokens (vllm-mlx)."""
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    backend = loaded.matrix.backends.get(target.backend)
    if backend is None:
        return {}
    name = f"backend {target.backend!r}"
    out = {}
    if backend.kind == "vllm-mlx":
        out["logprob_tolerance"] = (
            f"not measured on any item: {name} (vllm-mlx) returns no logprobs"
        )
        out["require_hits"] = (
            f"not measured on any item: {name} (vllm-mlx) reports no cached tokens"
        )
    elif not getattr(backend, "logprobs", True):
        out["logprob_tolerance"] = f"not measured on any item: {name} has logprobs: false"
    return out


HARNESS = HarnessProfile(
    {
        "cache-parity": {
            "target": "{target}",
            "scenarios": ["shared-prefix", "exact-repeat", "multi-turn", "concurrent"],
        },
        "logprob_tolerance": 1.0e-6,
        "require_hits": True,
    },
    blind=(
        *(
            Blind(
                "a prompt is rendered once and every request receives that rendering: a wrong "
                "rendering changes the prompt, not whether the outputs agree on it "
                "(tokenization checks renderings)",
                fault=fault,
                path="render",
            )
            for fault in ("changed-token", "empty", "truncated")
        ),
        Blind(
            "an engine with no uncached request serves the reference through the same path as "
            "the scenarios: a fault that changes every generation alike changes the reference "
            "too",
            fault="changed-token",
            every=True,
            backend="openai",
        ),
        Blind(
            "the cached tokens of a priming request (the prefix-sharing sibling, earlier "
            "turns: the first request of its own prompt, which the fake engine counts as a "
            "reference) are not judged: an engine that already held one changes nothing the "
            "scenarios compare. (A warm reference on this shape, sent first, is caught: "
            "tests/unit/test_cache_parity_gather.py.)",
            fault="warm-reference",
            path="generate",
            backend="openai",
        ),
    ),
    shapes=("llama-server", "openai"),
)
"""The verdict harness's check (``tests/harness``): every scenario but eviction (the fake
engine's cache holds more than ``max_eviction_prompts`` of its prompts), every gate written,
on both shapes."""
