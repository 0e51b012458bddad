"""What one check x suite runs in (:class:`RunContext`): what a kind's gatherer gets, and
what the framework's run (:mod:`.run`) reads of the selection. Below the kind (:mod:`.kind`)
and the run, which both name it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...backends.base import GenerationParams

if TYPE_CHECKING:
    from ...generation_cache import GenerationCache, ResolvedTarget
    from ...matrix import CheckSpec, LoadedMatrix, Settings
    from ...specs import Side
    from ...suites import Prompt, Suite


@dataclass
class RunContext:
    """What one check x suite runs in: the process's generation cache, the matrix, the check
    entry, the suite and the settings; the selection this process runs."""

    cache: GenerationCache
    loaded: LoadedMatrix
    check: CheckSpec
    index: int
    suite: Suite
    settings: Settings
    selected: frozenset[str] = frozenset()
    """Plan keys whose items survived selection (-k, --lf); empty means all."""
    only_selected: bool = False
    """Aggregate only the selected items (under ``--infercheck-shard``: other shards run the
    rest, and ``pytest-infercheck report`` aggregates the union)."""

    @property
    def spec(self) -> Any:
        """The options under the kind key (the kind's own model)."""
        return self.check.spec

    @property
    def thresholds(self) -> Any:
        """The thresholds this check is held to (the kind's own model)."""
        return self.check.kind_thresholds()

    def resolve(self, side: Side) -> ResolvedTarget:
        """The live target of one side of the check."""
        return self.cache.resolve(self.loaded, self.loaded.target(side.ref, side.loc))

    def prompt(self, prompt_id: str) -> Prompt:
        return next(p for p in self.suite.prompts if p.id == prompt_id)

    def params(self, prompt: Prompt) -> GenerationParams:
        """Greedy params of ``prompt`` under the run's settings: an explicit ``max_tokens``
        setting replaces the prompt's own."""
        s = self.settings
        tokens = s.max_tokens if s.max_tokens is not None else prompt.max_tokens
        tokens = tokens or s.default_max_tokens
        return GenerationParams(max_tokens=tokens, temperature=0.0, seed=s.seed)

    def in_scope(self, key: str) -> bool:
        """Whether the aggregate covers the item planned under ``key``: every item, or under
        ``--infercheck-shard`` the shard's selected ones."""
        return not self.only_selected or key in self.selected

    def wanted(self, key: str) -> bool:
        """Whether this process runs the item planned under ``key``."""
        return not self.selected or key in self.selected
