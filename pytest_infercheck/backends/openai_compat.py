"""Any OpenAI-compatible server: vLLM, SGLang, llama-server's /v1, mlx_lm.server, Ollama's /v1.

``/v1/chat/completions`` by default (the server applies its chat template), or
``/v1/completions`` with ``chat: false`` (the prompt is sent as raw text). Greedy
(``temperature: 0``), with ``logprobs``/``top_logprobs`` requested; a server that rejects
them is asked again without and the capability is recorded; a server that silently ignores
them is detected from its answer and recorded too, never reported as a silent None.

Both logprob shapes are parsed: the chat/new shape ``logprobs.content[{token, logprob,
top_logprobs}]`` and the legacy completions shape ``logprobs.{tokens, token_logprobs,
top_logprobs}``. Thinking is suppressed with ``chat_template_kwargs.enable_thinking`` and a
returned reasoning chain (``reasoning_content``/``reasoning`` or a ``<think>`` block) is split
from the answer and kept in ``extra["reasoning"]``.
"""

from __future__ import annotations

import re
import time
from typing import Any

from .base import Backend, Capabilities, Generation, GenerationParams, PromptInput
from .http import HttpClient, HttpError, HttpSettings

TOP_K = 5
THINK_BLOCK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


class OpenAICompatBackend(Backend):
    """A server speaking the OpenAI API."""

    kind = "openai"

    def __init__(
        self,
        name: str,
        settings: HttpSettings,
        *,
        model: str | None,
        chat: bool = True,
        top_k: int = TOP_K,
    ) -> None:
        super().__init__(name)
        self.http = HttpClient(name, settings)
        self.concurrency = settings.max_concurrency
        self.model = model
        self.chat = chat
        self.top_k = top_k
        self.observed: dict[str, Any] = {}
        """Capabilities learned from the server's answers (e.g. ``logprobs: False``)."""

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        logprobs = self.observed.get("logprobs", True)
        return Capabilities(
            top_k_logprobs=self.top_k if logprobs else 0,
            chat_template=self.chat,
        )

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, None, templated=self.chat, system=system, thinking=thinking)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        """In raw mode the baseline's rendered text is sent as it is (the exact string of its
        ids, e.g. with ``<s>``, which servers parse as the special token); in chat mode the
        server applies its own template, so nothing rendered elsewhere is taken."""
        return not self.chat and prompt.token_ids is not None

    def _payload(self, prompt: PromptInput, params: GenerationParams) -> Any:
        body: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "stream": False,
        }
        if self.model is not None:
            body["model"] = self.model
        if params.seed is not None:
            body["seed"] = params.seed
        if self.chat:
            messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
            messages.append({"role": "user", "content": prompt.text})
            body["messages"] = messages
            body["chat_template_kwargs"] = {"enable_thinking": prompt.thinking}
            if self.observed.get("logprobs", True):
                body["logprobs"] = True
                body["top_logprobs"] = self.top_k
        else:
            body["prompt"] = prompt.text
            if self.observed.get("logprobs", True):
                body["logprobs"] = self.top_k
        return body

    @property
    def _path(self) -> str:
        return "/v1/chat/completions" if self.chat else "/v1/completions"

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        body = self._payload(prompt, params)
        try:
            answer = await self.http.request("POST", self._path, body)
        except HttpError as exc:
            if exc.status != 400 or "logprob" not in exc.body.lower():
                raise
            self.observed["logprobs"] = False  # rejected: ask again without
            body = self._payload(prompt, params)
            answer = await self.http.request("POST", self._path, body)
        generation = parse_choice(answer, chat=self.chat)
        if "logprobs" in body and generation.chosen_logprobs is None:
            self.observed["logprobs"] = False  # silently ignored
        generation.elapsed_s = time.perf_counter() - started
        return generation

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "model": self.model,
            "observed": dict(self.observed),
        }

    async def aclose(self) -> None:
        await self.http.aclose()


def parse_choice(answer: Any, *, chat: bool) -> Generation:
    """The first choice of a (chat) completion response as a :class:`Generation`."""
    try:
        choice = answer["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise HttpError(f"response has no choices: {str(answer)[:200]!r}") from exc
    if chat:
        message = choice.get("message") or {}
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    else:
        text, reasoning = choice.get("text") or "", None
    match = THINK_BLOCK.match(text)
    if match:
        reasoning, text = match.group(1), text[match.end() :]
    chosen, top, tokens = parse_logprobs(choice.get("logprobs"))
    extra: dict[str, Any] = {"reasoning": reasoning} if reasoning else {}
    if tokens is not None:
        extra["tokens"] = tokens
    return Generation(
        text=text,
        token_ids=None,
        finish_reason=str(choice.get("finish_reason") or "unknown"),
        chosen_logprobs=chosen,
        top_logprobs=top,
        top_keys="text",
        extra=extra,
    )


def parse_logprobs(
    logprobs: Any,
) -> tuple[list[float] | None, list[dict[Any, float]] | None, list[str] | None]:
    """Chosen-token logprobs, top-k maps (keyed by token text) and the chosen tokens' texts,
    from either shape; ``(None, None, None)`` when the server sent none."""
    if not logprobs or not isinstance(logprobs, dict):
        return None, None, None
    if isinstance(logprobs.get("content"), list):
        entries = logprobs["content"]
        chosen = [float(e["logprob"]) for e in entries]
        top = [
            {t["token"]: float(t["logprob"]) for t in e.get("top_logprobs") or []} for e in entries
        ]
        return chosen, top, [str(e.get("token", "")) for e in entries]
    if isinstance(logprobs.get("token_logprobs"), list):
        chosen = [float(v) for v in logprobs["token_logprobs"] if v is not None]
        top = [
            {k: float(v) for k, v in (entry or {}).items()}
            for entry in logprobs.get("top_logprobs") or []
        ]
        return chosen, top or None, [str(t) for t in logprobs.get("tokens") or []]
    return None, None, None
