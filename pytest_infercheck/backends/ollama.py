"""Ollama through its native API (``/api/chat``, or ``/api/generate`` with ``raw: true`` when
``chat: false``), chosen by ``kind: ollama`` (models written ``ollama:name:tag``), never
guessed from a port number.

Greedy via ``options.temperature: 0`` and ``options.num_predict``; thinking suppressed with
``think: false`` (a returned ``thinking`` field is kept apart from the answer); logprobs are
requested (``logprobs``/``top_logprobs``) and parsed when the server sends them.
Streaming (``stream: true``) is NDJSON, one object per line, assembled the same way. Only
the backend's own endpoint is offered: :meth:`generate_via` is not supported.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..tools import Tool, ToolCall
from ..verdict.conduct import Abilities
from .base import (
    Backend,
    BackendError,
    Capabilities,
    Generation,
    GenerationParams,
    Message,
    PromptInput,
    chat_input,
)
from .capabilities import GENERATION_PATHS, REQUEST_PARAMS, STRUCTURED
from .endpoint_probe import probe_generation_paths, probe_request_params
from .hostile import probe_alive, send_hostile
from .http import HttpClient, HttpSettings
from .openai_compat import TOP_K, chat_messages, message_calls
from .params import TAKEN, openai_fields, taken
from .prompt_count import AS_TEXT, check_prompt_count

if TYPE_CHECKING:
    from ..structured.records import Path as StructuredPath
    from ..structured.records import StructuredRequest, StructuredResponse
    from .spec import OllamaSpec


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

    def logprob_unavailable_reason(self) -> str | None:
        if self.observed.get("logprobs") is False:
            return "Ollama answered without logprobs (logprobs: true, top_logprobs asked)"
        return None

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

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """Chat: every turn, sent as ``/api/chat`` messages with the tools; raw text has no
        turns and no tools. Ollama has no ``tool_choice``: a prompt that sets one is sent
        without it (its documented request has no such field)."""
        if self.chat:
            return chat_input(messages, thinking, tools, tool_choice)
        if tools:
            raise self.no_tools(
                tools,
                "it sends raw text (chat: false); with chat: true /api/chat gets them",
            )
        return await super().render_messages(messages, thinking)

    def _request(self, prompt: PromptInput, params: GenerationParams) -> tuple[str, Any]:
        """The endpoint and body of a generation request."""
        options: dict[str, Any] = {
            "temperature": params.temperature,
            "num_predict": params.max_tokens,
        }
        if params.seed is not None:
            options["seed"] = params.seed
        for name, value in openai_fields(params, TAKEN["ollama"]).items():
            options["repeat_penalty" if name == "repetition_penalty" else name] = value
        body: dict[str, Any] = {
            "model": self.model,
            "stream": False,
            "think": prompt.thinking,
            "options": options,
            "logprobs": True,
            "top_logprobs": params.logprobs or TOP_K,
        }
        if self.chat:
            offer = {"tools": [t.openai() for t in prompt.tools]} if prompt.tools else {}
            return "/api/chat", {**body, "messages": ollama_messages(prompt), **offer}
        return "/api/generate", {**body, "prompt": prompt.text, "raw": True}

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        path, body = self._request(prompt, params)
        generation = self._generation([await self.http.request("POST", path, body)])
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, None, why=AS_TEXT)

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """The same request with ``stream: true`` (NDJSON lines), assembled."""
        started = time.perf_counter()
        path, body = self._request(prompt, params)
        chunks = [c async for c in self.http.stream(path, {**body, "stream": True}, sse=False)]
        generation = self._generation(chunks)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, None, why=AS_TEXT)

    def _generation(self, answers: list[Any]) -> Generation:
        """One answer, or a stream's chunks, as a :class:`Generation` (texts and logprob
        entries concatenated, the last ``done_reason``)."""
        text: list[str] = []
        reasoning: list[str] = []
        entries: list[Any] = []
        calls: list[ToolCall] = []
        done = None
        for answer in answers:
            if self.chat:
                message = answer.get("message") or {}
                text.append(message.get("content") or "")
                reasoning.append(message.get("thinking") or "")
                calls.extend(message_calls(message.get("tool_calls")))
            else:
                text.append(answer.get("response") or "")
                reasoning.append(answer.get("thinking") or "")
            entries.extend(answer.get("logprobs") or [])
            done = answer.get("done_reason") or done
        if not entries:
            self.observed["logprobs"] = False
        return Generation(
            text="".join(text),
            token_ids=None,
            finish_reason="stop" if done == "stop" else "length",
            chosen_logprobs=[float(e["logprob"]) for e in entries] if entries else None,
            top_logprobs=[
                {t["token"]: float(t["logprob"]) for t in e.get("top_logprobs") or []}
                for e in entries
            ]
            if entries
            else None,
            top_keys="text",
            token_texts=[str(e.get("token", "")) for e in entries] if entries else None,
            reasoning="".join(reasoning) or None,
            tool_calls=tuple(calls),
        )

    async def send_hostile(self, kind: str) -> str:
        def body(text: str, max_tokens: int) -> dict[str, Any]:
            options = {"temperature": 0, "num_predict": max_tokens}
            return {
                "model": self.model,
                "prompt": text,
                "raw": True,
                "stream": False,
                "options": options,
            }

        return await send_hostile(self.http, kind, "/api/generate", body)

    async def probe_abilities(self, topic: str) -> Abilities:
        """Its streamed (NDJSON) request, one one-token request (:mod:`.endpoint_probe`);
        it has no other endpoint here; then its structured paths (:meth:`probe_structured`)."""
        if topic == GENERATION_PATHS:
            return await probe_generation_paths(self, endpoints=())
        if topic == STRUCTURED:
            return await self.probe_structured()
        if topic == REQUEST_PARAMS:
            return await probe_request_params(self, taken(self.kind, self.chat))
        return Abilities()

    async def alive(self) -> bool:
        return await probe_alive(self.http, "/api/tags", lambda doc: isinstance(doc, dict))

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "model": self.model,
            "url": self.http.settings.base_url,
            "observed": dict(self.observed),
        }

    def structured_paths(self) -> tuple[StructuredPath, ...]:
        """``chat`` and ``chat-stream``: ``/api/chat`` (:class:`~..structured.client.
        OllamaChatClient`)."""
        from ..structured.client import OllamaChatClient

        return OllamaChatClient.PATHS

    async def structured(
        self, request: StructuredRequest, path: StructuredPath
    ) -> StructuredResponse:
        """``request`` through ``/api/chat``, streamed or not."""
        from ..structured.client import OllamaChatClient

        return await OllamaChatClient(self.http, self.model).structured(request, path)

    async def probe_structured(self) -> Abilities:
        """The structured paths the server offers and lacks
        (:func:`~..structured.probe.probe_paths`): ``chat`` and ``chat-stream`` probed with
        one minimal ``/api/chat`` request each; ``chat-n2`` and both ``messages`` paths
        lacking without a request (``/api/chat`` has one answer and no Anthropic form)."""
        from ..structured.probe import probe_paths

        return await probe_paths(self)

    async def aclose(self) -> None:
        await self.http.aclose()


def ollama_messages(prompt: PromptInput) -> list[dict[str, Any]]:
    """``prompt``'s messages as Ollama's ``/api/chat`` documents them: the OpenAI shape for
    plain turns (:func:`~.openai_compat.chat_messages`); an assistant turn's calls as
    ``tool_calls: [{"function": {"name", "arguments": {...}}}]`` (arguments an object, no
    ids) and a tool turn as ``{"role": "tool", "content", "tool_name"}``."""
    out: list[dict[str, Any]] = []
    for message in chat_messages(prompt, object_arguments=True):
        if message["role"] == "tool":
            out.append(
                {"role": "tool", "content": message["content"], "tool_name": message["name"]}
            )
        elif "tool_calls" in message:
            calls = [{"function": dict(c["function"])} for c in message["tool_calls"]]
            out.append({"role": "assistant", "content": message["content"], "tool_calls": calls})
        else:
            out.append(message)
    return out


def create(
    name: str, spec: OllamaSpec, source: str, revision: str | None, url: str | None
) -> OllamaBackend:
    """The ``ollama`` backend of a ``backends:`` entry (see :mod:`.registry`): the model
    ``model_name`` (default: the source, the name Ollama knows it by), chat unless
    ``chat: false``."""
    chat = True if spec.chat is None else spec.chat
    return OllamaBackend(
        name, HttpSettings.of(spec, url), model=spec.model_name or source, chat=chat
    )
