"""What the generation cache (:mod:`.generation_cache`) keys its work by, and the small
records it hands out: a resolved target, a batching licence, a scoring to make ahead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .backends import Backend, BackendError
from .backends.capabilities import Scoring, TopKScoring
from .tools import canonical_json

if TYPE_CHECKING:
    from .backends import GenerationParams, PromptInput
    from .suites import Prompt

TargetKey = tuple[Any, ...]
"""What identifies a target's backend across YAML files (see :class:`ResolvedTarget`)."""
GenerationKey = tuple[TargetKey, str, tuple[Any, ...], int]
"""(target, ``PromptInput.key()``, ``GenerationParams.key()``, run)."""
GenerationJob = tuple["PromptInput", "GenerationParams", int]
"""(prompt input, generation params, run): one generation to make."""
ScoreKey = tuple[TargetKey, tuple[int, ...], tuple[int, ...]]
"""(target, prompt ids, continuation ids)."""


StatsKey = tuple[TargetKey, TargetKey, tuple[int, ...], tuple[int, ...]]
"""(baseline, test, prompt ids, the baseline's continuation ids)."""


@dataclass(frozen=True)
class ScoreJob:
    """A teacher-forced scoring to make ahead (:meth:`GenerationCache.prefetch`): full rows
    (:meth:`GenerationCache.score`) or top-k rows (``top_k``,
    :meth:`GenerationCache.score_top_k`) of ``continuation_ids`` after ``prompt_ids``."""

    prompt_ids: tuple[int, ...]
    continuation_ids: tuple[int, ...]
    top_k: bool

    def key(self, target: ResolvedTarget) -> ScoreKey:
        return (target.key, self.prompt_ids, self.continuation_ids)

    async def run(self, backend: Backend) -> Any:
        """The scoring's request(s) on ``backend``."""
        ids, continuation = list(self.prompt_ids), list(self.continuation_ids)
        if self.top_k and isinstance(backend, TopKScoring):
            return await backend.score_top_k(ids, continuation)
        if not self.top_k and isinstance(backend, Scoring):
            return await backend.score(ids, continuation)
        what = "top-k " if self.top_k else ""
        raise BackendError(
            f"backend {backend.name!r} ({backend.kind}) cannot score {what}teacher-forced"
        )


@dataclass(frozen=True)
class BatchingLicence:
    """Whether a target's generations may be batched, and why not."""

    batched: bool
    note: str = ""
    """Why it is generated one at a time (``batching: false``, the command line, a failed
    probe with what differed); empty when batched."""


@dataclass(frozen=True)
class ResolvedTarget:
    """A ``model@backend`` with its live backend; ``key`` identifies it across YAML files."""

    label: str
    key: TargetKey
    backend: Backend


RenderKey = tuple[TargetKey, str, str | None, Any, bool, str | None]
"""(target, prompt text, system prompt, turns, thinking, tools and tool choice)."""


def render_key(target: ResolvedTarget, prompt: Prompt, thinking: bool) -> RenderKey:
    """What a render is cached under: the target, the prompt's text, system prompt and turns,
    whether thinking is on, and the tools offered and tool choice (canonical JSON; None: no
    tools)."""
    offer = None
    if prompt.tools or prompt.tool_choice is not None:
        offer = canonical_json(
            {"tools": [t.openai() for t in prompt.tools], "choice": prompt.tool_choice}
        )
    return (target.key, prompt.text, prompt.system, prompt.messages, thinking, offer)
