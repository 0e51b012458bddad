"""What every check x suite run has: its place in the matrix, the engine, the suite and the
selection, with the lookups both kinds of run use (:class:`.runs.CheckRun` for comparisons,
:class:`.checks.target.TargetRun` for single-target checks)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .checks.comparison import generation_params

if TYPE_CHECKING:
    from .backends import GenerationParams
    from .config import CheckSpec, LoadedMatrix, Settings, Side
    from .engine import Engine, ResolvedTarget
    from .suites import Prompt, Suite


@dataclass
class SuiteRun:
    engine: Engine
    loaded: LoadedMatrix
    check: CheckSpec
    index: int
    suite: Suite
    settings: Settings
    selected: frozenset[str] = frozenset()
    """Keys (prompt ids, item plan keys) whose items survived selection (-k, --lf); empty
    means all."""
    only_selected: bool = False
    """Aggregate only the selected prompts (under ``--infercheck-shard``: other shards run the
    rest, and ``pytest-infercheck report`` aggregates the union)."""

    def resolve(self, side: Side) -> ResolvedTarget:
        """The live target of one side of the check."""
        return self.engine.resolve(self.loaded, self.loaded.target(side.ref, side.loc))

    def prompt(self, prompt_id: str) -> Prompt:
        return next(p for p in self.suite.prompts if p.id == prompt_id)

    def params(self, prompt: Prompt) -> GenerationParams:
        """Greedy params of ``prompt`` under the run's settings."""
        s = self.settings
        return generation_params(prompt, s.max_tokens, s.default_max_tokens, s.seed)

    def scope_prompts(self) -> list[Prompt]:
        """The prompts an aggregate covers: the whole suite, or under ``--infercheck-shard``
        the shard's selected ones (the other shards cover the rest)."""
        prompts = self.suite.prompts
        return [p for p in prompts if not self.only_selected or p.id in self.selected]
