"""vllm-mlx: an OpenAI-compatible server with a model-aware ``/health``.

Measured on vllm-mlx 0.6.0: logprobs are silently ignored (declared here, not discovered as
a surprise), ``seed`` is ignored, and the default engine answers concurrent requests with
HTTP 503 ``text_generation_busy`` (retried by the HTTP layer, honouring ``Retry-After``;
``--continuous-batching`` or ``VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION=wait`` avoid it).
Its Anthropic-style ``/v1/messages`` is reachable through :meth:`generate_via`; the chat
endpoints need a chat template in the model folder (without one they answer HTTP 500).

Its prompt caches (measured on 0.6.0, its pinned mlx-lm 0.31.3, Linux): the simple engine
reuses a system turn's KV state (``/v1/cache/stats`` ``system_kv_cache``) on streamed chat
requests only (a non-streamed one goes through ``model.chat``, no cache), so
:meth:`VllmMlxBackend.generate_cached` streams; ``--continuous-batching`` looks its prefix
cache up but never stores into it ("prompt-cache-save is unavailable on modern mlx-lm"):
every request misses. ``usage`` carries no ``prompt_tokens_details``: hits are unreported.

Structured requests (:mod:`~..structured.client`, every path; measured on 0.6.0): tools need
``--enable-auto-tool-choice --tool-call-parser hermes`` (Qwen 2.5 / Hermes templates; also
``--reasoning-parser``), written in ``serve:``. ``n`` is ignored (one choice for ``n: 2``,
noted by the reader); a strict ``response_format`` is refused (HTTP 422, "llguidance is
required"); the streamed ``/v1/messages`` says ``end_turn`` where the whole answer cut by
``max_tokens`` says ``max_tokens``, and counts 0 input tokens.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .base import BackendError, Capabilities, Generation, GenerationParams, PromptInput
from .hostile import probe_alive
from .http import HttpClient
from .openai_compat import OpenAICompatBackend, create_served, messages_payload, parse_message

if TYPE_CHECKING:
    from .spec import OpenAIServerSpec


class VllmMlxBackend(OpenAICompatBackend):
    kind = "vllm-mlx"
    no_logprobs = "vllm-mlx ignores logprob requests (measured on 0.6.0): not asked"
    structured_offer = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities(chat_template=self.chat)

    async def ensure_ready(self) -> None:
        health = await self.check_health()
        if health.get("engine_type") == "simple":
            # The simple engine runs one request at a time and answers others with 503 busy.
            self.concurrency = 1
            self.http = HttpClient(self.name, replace(self.http.settings, max_concurrency=1))
        await self.negotiate_logprobs(self.chat)  # declared: records why, asks nothing

    async def check_health(self) -> dict[str, Any]:
        """``/health`` must report the expected model loaded; returns the health document."""
        health = await self.http.request("GET", "/health")
        if not isinstance(health, dict) or not health.get("model_loaded"):
            raise BackendError(f"backend {self.name!r}: no model loaded: {health!r}")
        served = health.get("model_name")
        if self.model is not None and served != self.model:
            raise BackendError(
                f"backend {self.name!r}: the server has {served!r} loaded, expected {self.model!r}"
            )
        return health

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        if endpoint != "messages":
            return await super().generate_via(endpoint, prompt, params)
        started = time.perf_counter()
        answer = await self.http.request(
            "POST", "/v1/messages", messages_payload(prompt, params, self.model)
        )
        generation = parse_message(answer)
        generation.elapsed_s = time.perf_counter() - started
        return generation

    async def generate_cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate_stream`: the only path through the server's prompt cache (see the
        module docstring); plain :meth:`generate` bypasses it."""
        return await self.generate_stream(prompt, params)

    async def alive(self) -> bool:
        return await probe_alive(
            self.http,
            "/health",
            lambda doc: isinstance(doc, dict) and bool(doc.get("model_loaded")),
        )


def create(
    name: str, spec: OpenAIServerSpec, source: str, revision: str | None, url: str | None
) -> VllmMlxBackend:
    """The ``vllm-mlx`` backend of a ``backends:`` entry (see :mod:`.registry`)."""
    return create_served(VllmMlxBackend, name, spec, source, url)
