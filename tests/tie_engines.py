"""Engines whose later outputs part from their first one at a near-tie, for the tests of
``fail_on: decisive`` (a waiver applies only to what was judged past the near-tie).

:class:`ForkingBackend` wraps a real backend (in-process mlx-lm) and, like
``tests.faults``' ``flaky-`` mode, leaves the first generation of each prompt (by rendered
prompt and parameters) intact and forks every later one, and every one of a batch, at
token :data:`FORK_AT`: it takes the best other token there (the engine's own second choice,
by a teacher-forced score) and reports both generations' logprobs there as two tokens of
about half the probability each, 0.002 nats apart (a near-tie by the default
``tie_margin`` of 0.01). What follows the fork is, by the backend's name (the hook
:func:`pytest_infercheck_wrap_backend` wraps ``fork-<then>`` and ``fork-<then>-<anything>``,
so that several checks of one run each have a wrapper of their own, each with its own first
generations):

- ``fork-honest``: the engine's own greedy continuation of the forked prefix (what a
  faithful engine whose floating-point reordering flipped a near-tie would produce);
- ``fork-degenerate``: the forked token repeated to the end (a fault that shows only after
  the fork);
- ``fork-unscored``: as honest, but the backend offers no teacher forcing, so nothing can
  judge what follows the fork.

Teacher-forced scores are the wrapped engine's own (faithful).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_infercheck.backends import Backend, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Message
from pytest_infercheck.config import BackendSpec

FORK_AT = 1
"""The token where later generations part from the first."""
TIE = 0.002
"""Nats between the two tokens at the fork, as both generations report them."""
THEN = ("honest", "degenerate", "unscored")


def pytest_infercheck_wrap_backend(
    backend: Backend, name: str, spec: BackendSpec
) -> Backend | None:
    """The plugin hook: wrap backends named ``fork-<honest|degenerate|unscored>[-...]``."""
    parts = name.split("-")
    if len(parts) < 2 or parts[0] != "fork" or parts[1] not in THEN:
        return None
    then = parts[1]
    return ForkingBackend(backend, then, name=name)


class ForkingBackend(Backend):
    """``inner`` whose later generations fork at a near-tie (see the module docstring)."""

    def __init__(self, inner: Backend, then: str, *, name: str) -> None:
        super().__init__(name)
        self.inner = inner
        self.then = then
        self.kind = inner.kind
        self.capabilities = (
            dataclasses.replace(inner.capabilities, teacher_forcing=False, teacher_forcing_top_k=0)
            if then == "unscored"
            else inner.capabilities
        )
        self.concurrency = inner.concurrency
        self.batching = inner.batching
        self.forked = 0
        self._seen: dict[tuple[str, tuple[Any, ...]], int] = {}

    # -- delegated ------------------------------------------------------------------------
    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return await self.inner.render(user_text, system, thinking)

    async def render_messages(
        self, messages: Sequence[Message], thinking: bool, **offer: Any
    ) -> PromptInput:
        return await self.inner.render_messages(messages, thinking, **offer)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return await self.inner.accepts_token_ids(prompt)

    async def alive(self) -> bool:
        return await self.inner.alive()

    async def ensure_ready(self) -> None:
        await self.inner.ensure_ready()

    def tokenizer_fingerprint(self) -> str | None:
        return self.inner.tokenizer_fingerprint()

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "name": self.name, "fork": self.then}

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        return await self.inner.score(prompt_ids, continuation_ids)

    async def aclose(self) -> None:
        return None  # the plugin closes the wrapped backend itself

    # -- forking --------------------------------------------------------------------------
    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        later = self._later(prompt, params)
        generation = await self.inner.generate(prompt, params)
        return await self._shape(generation, prompt, params, later)

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        """Every generation of a batch forks (and none counts as a prompt's first)."""
        results = await self.inner.generate_batch(prompts, params)
        out: list[Generation | BaseException] = []
        for prompt, result in zip(prompts, results, strict=True):
            if isinstance(result, Generation):
                out.append(await self._shape(result, prompt, params, True))
            else:
                out.append(result)
        return out

    def _later(self, prompt: PromptInput, params: GenerationParams) -> bool:
        """Counted when the request is made: the first of a prompt is intact."""
        key = (prompt.key(), params.key())
        seen = self._seen.get(key, 0)
        self._seen[key] = seen + 1
        return seen > 0

    async def _shape(
        self, g: Generation, prompt: PromptInput, params: GenerationParams, fork: bool
    ) -> Generation:
        """``g`` with its logprobs at the fork reported as a near-tie, forked when ``fork``."""
        ids = list(g.token_ids or [])
        lps = list(g.chosen_logprobs or [])
        if len(ids) <= FORK_AT + 1 or len(lps) != len(ids) or prompt.token_ids is None:
            return g  # too short to fork (the suites of the tests have longer answers)
        eos = ids[-1] if g.finish_reason == "stop" else None
        t = FORK_AT
        rows = await self.inner.score(list(prompt.token_ids), ids)
        row = np.array(rows[t], dtype=np.float64)
        for banned in (ids[t], eos):
            if banned is not None:
                row[banned] = -np.inf
        alt = int(row.argmax())
        own, other = math.log(0.5) + TIE / 2, math.log(0.5) - TIE / 2  # they sum to 1
        if not fork:
            lps[t] = own
            top: list[dict[Any, float]] = [{tok: lp} for tok, lp in zip(ids, lps, strict=True)]
            top[t] = {ids[t]: own, alt: other}
            return dataclasses.replace(g, chosen_logprobs=lps, top_logprobs=top)
        self.forked += 1
        head = [*ids[:t], alt]
        if self.then == "degenerate":
            tail = [alt] * (len(ids) - t - 1)
            tail_lps = [-0.01] * len(tail)
            finish = "length"
        else:
            rest = params.max_tokens - len(head)
            tail, tail_lps, finish = [], [], "length"
            if rest > 0:
                forked = PromptInput(prompt.text, (*prompt.token_ids, *head), templated=True)
                more = await self.inner.generate(
                    forked, dataclasses.replace(params, max_tokens=rest)
                )
                tail = list(more.token_ids or [])
                tail_lps = list(more.chosen_logprobs or [])
                finish = more.finish_reason or "length"
        new_ids = head + tail
        new_lps = [*lps[:t], own, *tail_lps]
        new_top: list[dict[Any, float]] = [
            {tok: lp} for tok, lp in zip(new_ids, new_lps, strict=True)
        ]
        new_top[t] = {alt: own, ids[t]: other}
        text_ids = new_ids[:-1] if finish == "stop" and new_ids[-1] == eos else new_ids
        return dataclasses.replace(
            g,
            text=self._decode(text_ids),
            token_ids=new_ids,
            chosen_logprobs=new_lps,
            top_logprobs=new_top,
            token_texts=None,
            finish_reason=finish,
        )

    def _decode(self, ids: list[int]) -> str:
        loaded = getattr(self.inner, "_loaded", None)
        assert loaded is not None, "the forking engine wraps in-process mlx-lm"
        return str(loaded.tokenizer.decode(ids))
