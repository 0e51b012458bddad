"""llama-server (llama.cpp) through its native API, so that it gets token-level comparisons.

- The prompt is sent as token ids. When another backend rendered it, llama-server's own
  ``/tokenize`` must reproduce those ids before they are accepted (same tokenizer).
- ``/completion`` with ``temperature: 0``, ``n_probs``, ``return_tokens`` and
  ``cache_prompt: false`` (the prompt cache moves logprobs by a float32 step). The returned
  ``tokens`` include EOS; probability entries are aligned on token ids, because an entry is
  left out when a token ends inside a UTF-8 character.
- Teacher forcing over HTTP: no prompt logprobs, so one request per position, the prefix as
  ids, ``n_predict: 1`` and ``n_probs`` = the vocabulary, with a ``logit_bias`` that forces
  an ASCII token so no position is lost to the UTF-8 gap (the reported distribution is taken
  before the bias). That gives true full-vocabulary KL against an in-process engine.
- ``/props`` (build info, model path) and ``/v1/models`` (vocabulary size) are recorded.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import numpy as np

from .base import Backend, BackendError, Capabilities, Generation, GenerationParams, PromptInput
from .http import HttpClient, HttpSettings

TOP_K = 8


class LlamaServerBackend(Backend):
    kind = "llama-server"

    def __init__(self, name: str, settings: HttpSettings, *, chat: bool = False) -> None:
        super().__init__(name)
        self.http = HttpClient(name, settings)
        self.chat = chat
        self.concurrency = settings.max_concurrency
        self.props: dict[str, Any] = {}
        self.n_vocab = 0
        self._forced_token: int | None = None

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities.token_level(TOP_K, self.chat)

    async def ensure_ready(self) -> None:
        await self.http.request("GET", "/health")
        self.props = await self.http.request("GET", "/props")
        models = await self.http.request("GET", "/v1/models")
        try:
            self.n_vocab = int(models["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(f"backend {self.name!r}: no n_vocab in /v1/models") from exc
        self._forced_token = (await self._tokenize("0", add_special=False))[-1]

    async def _tokenize(self, text: str, *, add_special: bool) -> list[int]:
        answer = await self.http.request(
            "POST",
            "/tokenize",
            {"content": text, "add_special": add_special, "parse_special": True},
        )
        return [int(t) for t in answer["tokens"]]

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        if self.chat:
            messages = [{"role": "system", "content": system}] if system else []
            messages.append({"role": "user", "content": user_text})
            answer = await self.http.request(
                "POST",
                "/apply-template",
                {"messages": messages, "chat_template_kwargs": {"enable_thinking": thinking}},
            )
            text = str(answer["prompt"])
            ids = await self._tokenize(text, add_special=False)
        else:
            text = f"{system}\n\n{user_text}" if system else user_text
            ids = await self._tokenize(text, add_special=True)
            plain = await self._tokenize(text, add_special=False)
            if ids[1:] == plain and len(ids) == len(plain) + 1:
                # The rendered text is the exact string of the ids: spell out the BOS.
                text = str(self.props.get("bos_token", "")) + text
        return PromptInput(text, tuple(ids), self.chat, None, system=system, thinking=thinking)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        if prompt.token_ids is None:
            return False
        # A rendered text is the exact string of its ids (special tokens spelled out).
        ids = await self._tokenize(prompt.text, add_special=False)
        return tuple(ids) == prompt.token_ids

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        body: dict[str, Any] = {
            "prompt": list(prompt.token_ids) if prompt.token_ids is not None else prompt.text,
            "n_predict": params.max_tokens,
            "temperature": params.temperature,
            "n_probs": TOP_K,
            "return_tokens": True,
            "cache_prompt": False,
        }
        if params.seed is not None:
            body["seed"] = params.seed
        answer = await self.http.request("POST", "/completion", body)
        tokens = [int(t) for t in answer.get("tokens") or []]
        chosen, top = align_probabilities(tokens, answer.get("completion_probabilities") or [])
        stop = answer.get("stop_type")
        return Generation(
            text=str(answer.get("content", "")),
            token_ids=tokens,
            finish_reason="stop" if stop in ("eos", "word") else "length",
            chosen_logprobs=chosen,
            top_logprobs=top,
            elapsed_s=time.perf_counter() - started,
        )

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """One request per position (concurrent, bounded); rows are full-vocab logprobs."""

        async def position(i: int) -> np.ndarray:
            body: dict[str, Any] = {
                "prompt": [*prompt_ids, *continuation_ids[:i]],
                "n_predict": 1,
                "temperature": 0,
                "n_probs": self.n_vocab,
                "cache_prompt": False,
                "logit_bias": [[self._forced_token, 100.0]] if self._forced_token else [],
            }
            answer = await self.http.request("POST", "/completion", body)
            row = np.full(self.n_vocab, -np.inf, dtype=np.float32)
            entries = answer.get("completion_probabilities") or []
            if not entries:
                raise BackendError(f"backend {self.name!r}: no probabilities at position {i}")
            for item in entries[0].get("top_logprobs") or []:
                row[int(item["id"])] = float(item["logprob"])
            return row

        if not continuation_ids:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        rows = await asyncio.gather(*(position(i) for i in range(len(continuation_ids))))
        return np.stack(rows)

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "build_info": self.props.get("build_info"),
            "model_path": self.props.get("model_path"),
            "n_vocab": self.n_vocab,
        }

    async def aclose(self) -> None:
        await self.http.aclose()


def align_probabilities(
    tokens: list[int], entries: list[dict[str, Any]]
) -> tuple[list[float], list[dict[Any, float]]]:
    """Chosen logprob and top-k map per generated token, matched by id.

    llama-server omits the entry of a token that ends inside a UTF-8 character; such a
    position gets NaN and an empty map rather than shifting every later entry.
    """
    chosen: list[float] = []
    top: list[dict[Any, float]] = []
    j = 0
    for token in tokens:
        if j < len(entries) and int(entries[j].get("id", -1)) == token:
            entry = entries[j]
            chosen.append(float(entry.get("logprob", math.nan)))
            top.append({int(t["id"]): float(t["logprob"]) for t in entry.get("top_logprobs", [])})
            j += 1
        else:
            chosen.append(math.nan)
            top.append({})
    return chosen, top
