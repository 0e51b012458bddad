"""Optional capabilities of a backend, beyond :class:`~.base.Backend`: what some checks use
where a backend offers it. A check tests ``isinstance(backend, Stepping)`` and takes another
way when the backend does not offer it.

A backend offers a capability by defining its methods (no registration, no base class).
The test is on the methods' presence only, not their signatures, and on Python 3.12 and
later it looks at the class, not at ``__getattr__``: a wrapper that delegates to the backend
it wraps offers a capability only by defining its methods.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

    from .base import Generation, GenerationParams, PromptInput, TopKRow
    from .mlx_lockstep import Stepper


@runtime_checkable
class Scoring(Protocol):
    """A backend that scores a continuation teacher-forced, full rows. Whether the engine
    gives them in this configuration is probed at readiness and said by
    ``capabilities.teacher_forcing`` (vLLM: only when its ``--max-logprobs`` covers the
    vocabulary); the comparisons read that flag, the generation cache this Protocol."""

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Teacher-forced full-vocabulary log-probabilities, shape (len(continuation), V).

        Row i is the distribution that predicts ``continuation_ids[i]`` given the prompt and
        ``continuation_ids[:i]``."""
        ...


@runtime_checkable
class TopKScoring(Protocol):
    """A backend that scores a continuation teacher-forced by its top k only (vLLM's
    ``prompt_logprobs``, llama-server, SGLang); ``k`` is ``capabilities.teacher_forcing_top_k``
    (0: not in this configuration)."""

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        """Row i holds the log-probability of ``continuation_ids[i]`` given the prompt and
        ``continuation_ids[:i]``, and the top ``capabilities.teacher_forcing_top_k`` of
        that distribution."""
        ...


@runtime_checkable
class Stepping(Protocol):
    """An in-process model that the comparisons step in lockstep (:mod:`.mlx_lockstep`):
    the baseline and test models fed the same tokens, batched when licensed."""

    def stepper(self) -> Stepper | None:
        """The model, its end-of-sequence ids and its decoder, for :mod:`.mlx_lockstep`;
        None when this configuration does not step (options the lockstep's plain caches
        would not apply: a draft model, a quantized KV cache)."""
        ...

    def lockstep_ids(self, prompt: PromptInput) -> list[int]:
        """The token ids the backend generates from for ``prompt`` (as its ``generate``)."""
        ...


@runtime_checkable
class SharedRows(Stepping, Protocol):
    """An in-process model whose generation can hand out its per-step rows as the
    teacher-forced rows of its own continuation (:mod:`.mlx_rows`)."""

    async def generate_with_rows(self, prompt: PromptInput, params: GenerationParams) -> Any:
        """``(generation, rows)``: the generation :meth:`generate` returns and, when they are
        what ``score`` gives for its prompt ids and generated tokens, its rows ``(T, V)``
        (else None)."""
        ...


@runtime_checkable
class ModelFolder(Protocol):
    """A backend whose model may be a folder on this machine (a server started on it): its
    tokenizer judges a text-only output against the baseline's token ids."""

    def model_folder(self) -> Path | None:
        """The served model's local folder, None when the model is not one."""
        ...


@runtime_checkable
class TemplatedText(ModelFolder, Protocol):
    """A server that applies the chat template of its model folder itself: the text its
    engine tokenizes can be rendered here, from that folder."""

    async def templated_text(self, prompt: PromptInput) -> str:
        """``prompt``'s messages rendered by the chat template of :meth:`model_folder`."""
        ...


@runtime_checkable
class UncachedGeneration(Protocol):
    """A backend that can generate with no reusable cache state: the reference of
    ``cache-parity`` (llama-server ``cache_prompt: false``, vLLM a unique ``cache_salt``,
    mlx-lm a fresh prompt cache). A server without it has no way around its cache."""

    async def generate_uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """``prompt`` generated as :meth:`~.base.Backend.generate` does, reusing no cached
        state (and, where the engine allows, leaving none behind for later requests)."""
        ...


@runtime_checkable
class CachedGeneration(Protocol):
    """A backend whose plain :meth:`~.base.Backend.generate` bypasses the engine's prompt
    cache (llama-server, mlx-lm in-process): ``cache-parity`` generates through the cache with
    this. A backend without it generates through its cache already (vLLM, OpenAI servers)."""

    async def generate_cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """``prompt`` generated reusing the engine's prompt cache, and keeping its state."""
        ...


@runtime_checkable
class CacheCapacity(Protocol):
    """A backend that knows how many tokens its prompt cache holds (``cache-parity``'s
    eviction pressure is exercised only where this capacity can be reached)."""

    async def cache_capacity(self) -> int | None:
        """Tokens the prompt cache holds at most; None when the server does not say."""
        ...


GENERATION_PATHS = "generation-paths"
"""A probe topic (:meth:`~.base.Backend.probe_abilities`): the streamed request and the
completions, chat and messages endpoints (one one-token generation each)."""
TOKENIZE_TOPIC = "tokenize"
"""A probe topic: a server's own tokenize endpoint."""
STRUCTURED = "structured"
"""A probe topic: the structured-output paths (chat, chat-stream, chat-n2, messages,
messages-stream)."""
REQUEST_PARAMS = "request-params"
"""A probe topic: the request parameters the backend's kind sends (:mod:`.params`), one
one-token request each (a field the server refuses with HTTP 400/422 is lacking)."""
PROBE_TOPICS = (GENERATION_PATHS, TOKENIZE_TOPIC, STRUCTURED, REQUEST_PARAMS)
"""Every probe topic; a check asks only for the ones it uses (a generating probe can warm a
prefix cache)."""


@runtime_checkable
class NextTokenSampling(Protocol):
    """A backend that draws many next tokens of one prompt at once with the sampling
    parameters under test, through the engine's own sampler (mlx-lm in-process: one forward
    pass, its sampler applied to many copies of the row). A server draws them by requests
    (``n`` or concurrency) instead."""

    async def sample_next(
        self, prompt: PromptInput, params: GenerationParams, count: int
    ) -> list[int]:
        """``count`` independent draws of the token after ``prompt`` under ``params``."""
        ...


@runtime_checkable
class RawLogits(Protocol):
    """A backend that gives the raw (pre-softmax) logits of teacher-forced positions, not
    only log-probabilities (mlx-lm in-process): the repetition penalty acts on them."""

    async def raw_logits(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Float32 ``(len(continuation_ids), V)`` logits predicting each continuation token
        (the row before the last one predicts the token after the prompt)."""
        ...


@runtime_checkable
class ProcessedProbs(Protocol):
    """A backend that reports the distribution its sampler draws from (after its
    truncations and temperature): llama-server's ``post_sampling_probs``."""

    async def processed_probs(
        self, prompt: PromptInput, params: GenerationParams
    ) -> dict[int, float] | None:
        """The probabilities of the next token after ``prompt`` under ``params``, the support
        only; None when the engine reported none for this request."""
        ...
