"""The replay backend: a golden file (see :mod:`.file`) served as if it were the engine that
recorded it; and whether a comparison can score the test side against it.

It renders a prompt as the recorded input, "generates" the recorded output (token ids, text,
finish reason, chosen and top-k logprobs) and names the recording engine as its identity. A
conversation renders as recorded too, every turn and each ``generate`` turn's history, and
each ``generate`` turn "generates" its recorded output: a baseline filled in from the golden
has the recorded turns (:meth:`~..generation_cache.GenerationCache.conversation`). It
has no live model, so it cannot score teacher-forced: a comparison against it scores the
golden continuation on the test side instead, full rows or top-k (``golden-top-k-lower-bound``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from ..backends.base import (
    Backend,
    Capabilities,
    Generation,
    GenerationParams,
    Message,
    PromptInput,
)
from ..tools import Tool
from .file import GoldenFile, shown

GOLDEN_KIND = "golden"


class ResolvedTarget(Protocol):
    """A side of a comparison as :func:`golden_scorable` reads it (the generation cache's
    :class:`~..generation_cache.ResolvedTarget`, which replays goldens with this module)."""

    @property
    def backend(self) -> Backend: ...


class GoldenBackend(Backend):
    """Replays ``golden``; ``name`` is the target label (``golden:adder-v1``)."""

    kind = GOLDEN_KIND

    def __init__(self, name: str, golden: GoldenFile) -> None:
        super().__init__(name)
        self.golden = golden

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities(top_k_logprobs=self.golden.top_k, token_ids=True)

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return self.golden.render(user_text, system, thinking)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        return self.golden.render_messages(messages, thinking, tools, tool_choice)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.golden.generation(prompt, params)

    def tokenizer_fingerprint(self) -> str | None:
        return self.golden.tokenizer

    def identity(self) -> dict[str, Any]:
        """The recording engine's identity, with where it was replayed from."""
        header = self.golden.header
        return {
            **header.get("engine", {}),
            "golden": shown(self.golden.path),
            "recorded_target": header.get("target"),
            "recorded_plugin_version": header.get("plugin_version"),
        }


def golden_scorable(
    baseline: ResolvedTarget,
    test: ResolvedTarget,
    shared_ids: bool,
    prompt_ids: tuple[int, ...] | None,
    base: Generation,
) -> bool:
    """A golden baseline with id-keyed top-k and chosen logprobs at every position of its
    continuation, and a test side that shares its token ids and can score teacher-forced
    (full rows, or its top k: ``teacher_forcing_top_k``)."""
    n = len(base.token_ids or [])
    caps = test.backend.capabilities
    return (
        baseline.backend.kind == GOLDEN_KIND
        and shared_ids
        and prompt_ids is not None
        and (caps.teacher_forcing or caps.teacher_forcing_top_k > 0)
        and n > 0
        and base.top_keys == "id"
        and len(base.top_logprobs or []) == n
        and len(base.chosen_logprobs or []) == n
        and all(base.top_logprobs or [])
    )
