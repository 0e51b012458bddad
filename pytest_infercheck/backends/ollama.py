"""Ollama through its native API (``/api/chat``, or ``/api/generate`` with ``raw: true`` when
``chat: false``), chosen by ``kind: ollama`` (models written ``ollama:name:tag``), never
guessed from a port number.

Greedy via ``options.temperature: 0`` and ``options.num_predict``; thinking suppressed with
``think: false`` (a returned ``thinking`` field is kept apart from the answer); logprobs are
requested (``logprobs``/``top_logprobs``) and parsed when the server sends them.
"""

from __future__ import annotations

import time
from typing import Any

from .base import Backend, BackendError, Capabilities, Generation, GenerationParams, PromptInput
from .http import HttpClient, HttpSettings
from .openai_compat import TOP_K


class OllamaBackend(Backend):
    kind = "ollama"

    def __init__(self, name: str, settings: HttpSettings, *, model: str, chat: bool) -> None:
        super().__init__(name)
        self.http = HttpClient(name, settings)
        self.model = model
        self.chat = chat
        self.concurrency = settings.max_concurrency
        self.observed: dict[str, Any] = {}

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        logprobs = self.observed.get("logprobs", True)
        return Capabilities(top_k_logprobs=TOP_K if logprobs else 0, chat_template=self.chat)

    async def ensure_ready(self) -> None:
        tags = await self.http.request("GET", "/api/tags")
        names = {m.get("name") for m in tags.get("models", [])} if isinstance(tags, dict) else set()
        if self.model not in names:
            raise BackendError(
                f"backend {self.name!r}: Ollama has no model {self.model!r} "
                f"(has: {', '.join(sorted(n for n in names if n)) or 'none'})"
            )

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, None, templated=self.chat, system=system, thinking=thinking)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        options: dict[str, Any] = {
            "temperature": params.temperature,
            "num_predict": params.max_tokens,
        }
        if params.seed is not None:
            options["seed"] = params.seed
        body: dict[str, Any] = {
            "model": self.model,
            "stream": False,
            "think": prompt.thinking,
            "options": options,
            "logprobs": True,
            "top_logprobs": TOP_K,
        }
        if self.chat:
            messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
            messages.append({"role": "user", "content": prompt.text})
            body["messages"] = messages
            answer = await self.http.request("POST", "/api/chat", body)
            message = answer.get("message") or {}
            text, reasoning = message.get("content") or "", message.get("thinking")
        else:
            body.update(prompt=prompt.text, raw=True)
            answer = await self.http.request("POST", "/api/generate", body)
            text, reasoning = answer.get("response") or "", answer.get("thinking")
        entries = answer.get("logprobs")
        if not entries:
            self.observed["logprobs"] = False
        extra: dict[str, Any] = {"reasoning": reasoning} if reasoning else {}
        if entries:
            extra["tokens"] = [str(e.get("token", "")) for e in entries]
        return Generation(
            text=text,
            token_ids=None,
            finish_reason="stop" if answer.get("done_reason") == "stop" else "length",
            chosen_logprobs=[float(e["logprob"]) for e in entries] if entries else None,
            top_logprobs=[
                {t["token"]: float(t["logprob"]) for t in e.get("top_logprobs") or []}
                for e in entries
            ]
            if entries
            else None,
            top_keys="text",
            elapsed_s=time.perf_counter() - started,
            extra=extra,
        )

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "model": self.model,
            "url": self.http.settings.base_url,
            "observed": dict(self.observed),
        }

    async def aclose(self) -> None:
        await self.http.aclose()
