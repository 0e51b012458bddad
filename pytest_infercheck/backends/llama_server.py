"""llama-server (llama.cpp) through its native API, so that it gets token-level comparisons.

- The prompt is sent as token ids. When another backend rendered it, llama-server's own
  ``/tokenize`` must reproduce those ids before they are accepted (same tokenizer).
- ``/completion`` with ``temperature: 0``, ``n_probs``, ``return_tokens`` and
  ``cache_prompt: false`` (the prompt cache moves logprobs by a float32 step; ``cache-parity``
  turns it on, :meth:`LlamaServerBackend.generate_cached`). The returned
  ``tokens`` include EOS; probability entries are aligned on token ids, because an entry is
  left out when a token ends inside a UTF-8 character.
- Teacher forcing over HTTP: no prompt logprobs, so one request per position, the prefix as
  ids, ``n_predict: 1`` and ``n_probs`` = the vocabulary, with a ``logit_bias`` that forces
  an ASCII token so no position is lost to the UTF-8 gap (the reported distribution is taken
  before the bias). That gives true full-vocabulary KL against an in-process engine, up to
  :data:`FULL_VOCAB_SCORING_LIMIT` ids; above it only the generation's top-k is compared.
- ``/props`` (build info, model path) and ``/v1/models`` (vocabulary size) are recorded.
- LoRA adapters (a model's ``adapter: {gguf: FILE}``): the server loads them at start
  (``--lora FILE``) and applies them at scale 1 to a request that names none; every
  generation request of the backend carries ``lora: [{id, scale}]`` for each adapter of
  ``/lora-adapters``: 1 for the model's adapter, 0 for the others (the base model: all 0).
  A model whose adapter the server has not loaded fails at start
  (:func:`~.llama_wire.lora_scales`).
- Feature activity (a backend whose serve command turns on speculative decoding or a
  quantized KV cache, :func:`~pytest_infercheck.features.declared_features`): each
  ``/completion`` answer's ``timings`` (:func:`timings_activity`), per request, so requests
  in flight together do not mix.
- Streaming: ``/completion`` with ``stream: true``; every SSE chunk carries its ``content``,
  ``tokens`` and probability entries, the last one ``stop_type``.
- :meth:`generate_via`: ``completions`` (``/v1/completions`` with the text of
  ``/apply-template``, the server's own template, rendered once), ``chat``
  (``/v1/chat/completions``) and ``messages`` (Anthropic-style ``/v1/messages``); text only.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..tools import Tool
from ..verdict.conduct import Abilities
from .base import (
    Backend,
    BackendError,
    Capabilities,
    Generation,
    GenerationParams,
    Message,
    PromptInput,
    TopKRow,
    chat_input,
)
from .capabilities import GENERATION_PATHS, REQUEST_PARAMS, STRUCTURED
from .endpoint_probe import probe_generation_paths, probe_request_params
from .hostile import probe_alive, send_hostile
from .http import HttpClient, HttpSettings
from .llama_wire import LORA_PATHS, StreamedCompletion, lora_scales, native_generation
from .llama_wire import TIMINGS_SOURCE as TIMINGS_SOURCE
from .llama_wire import _count as _count
from .llama_wire import align_probabilities as align_probabilities
from .llama_wire import timings_activity as timings_activity
from .openai_compat import (
    chat_messages,
    messages_payload,
    parse_choice,
    parse_message,
    tool_fields,
)
from .params import TAKEN, llama_fields, openai_fields, taken
from .prompt_count import PromptTruncated, check_prompt_count, sent_ids, truncated

if TYPE_CHECKING:
    from ..structured.records import Path as StructuredPath
    from ..structured.records import StructuredRequest, StructuredResponse
    from .spec import LlamaServerSpec

TOP_K = 8
FULL_VOCAB_SCORING_LIMIT = 32_768
"""Largest vocabulary scored teacher-forced over HTTP. A full row is ``n_probs`` = V entries
of JSON per position (about 10 MB at V = 151,936), so above this the backend declares no
teacher forcing and comparisons use its generation's top-k against the other side's full
rows (a lower bound of the KL, named ``top-k-lower-bound`` on the item)."""


class LlamaServerBackend(Backend):
    kind = "llama-server"

    def __init__(
        self, name: str, settings: HttpSettings, *, chat: bool = False, adapter: str | None = None
    ) -> None:
        super().__init__(name)
        self.http = HttpClient(name, settings)
        self.adapter = adapter
        """The model's LoRA adapter (a GGUF file the server loaded with ``--lora``)."""
        self.loras: list[dict[str, Any]] = []
        """The server's ``/lora-adapters``."""
        self.chat = chat
        self.concurrency = settings.max_concurrency
        self.props: dict[str, Any] = {}
        self.n_vocab = 0
        self._forced_token: int | None = None
        self._adds_bos_only = False
        """Whether tokenizing with ``add_special`` adds exactly one token, in front (a BOS):
        learnt once per server (:meth:`ensure_ready`)."""
        self._templated: dict[str, str] = {}
        self._pieces: dict[int, str] = {}

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        scores = self.n_vocab <= FULL_VOCAB_SCORING_LIMIT
        return Capabilities(scores, TOP_K, True, scores, self.chat, teacher_forcing_top_k=TOP_K)

    async def ensure_ready(self) -> None:
        await self.http.request("GET", "/health")
        self.props = await self.http.request("GET", "/props")
        await self._apply_loras()
        models = await self.http.request("GET", "/v1/models")
        try:
            self.n_vocab = int(models["data"][0]["meta"]["n_vocab"])
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(f"backend {self.name!r}: no n_vocab in /v1/models") from exc
        special, plain = await asyncio.gather(
            self._tokenize("0", add_special=True), self._tokenize("0", add_special=False)
        )
        self._forced_token = plain[-1]
        # llama.cpp's tokenizers (SPM, BPE, WPM, UGM) add their special tokens around the
        # same tokens: [BOS if add_bos] + tokens + [EOS/SEP if add_eos], whatever the text.
        self._adds_bos_only = len(special) == len(plain) + 1 and special[1:] == plain

    async def _apply_loras(self) -> None:
        """Read ``/lora-adapters`` and set the ``lora`` field of every generation request
        (:func:`~.llama_wire.lora_scales`). A server that does not answer it has no adapter
        for a base model to avoid, and fails a model with an adapter."""
        try:
            answer = await self.http.request("GET", "/lora-adapters")
        except BackendError:
            if self.adapter is not None:
                raise
            answer = []
        self.loras = (
            [dict(e) for e in answer if isinstance(e, dict)] if isinstance(answer, list) else []
        )
        if self.loras or self.adapter is not None:
            self.http.post_fields = {"lora": lora_scales(self.loras, self.adapter, self.name)}
            self.http.post_paths = LORA_PATHS

    async def _tokenize(self, text: str, *, add_special: bool) -> list[int]:
        answer = await self.http.request(
            "POST",
            "/tokenize",
            {"content": text, "add_special": add_special, "parse_special": True},
        )
        return [int(t) for t in answer["tokens"]]

    async def tokenize(self, text: str) -> list[int]:
        return await self._tokenize(text, add_special=False)

    async def detokenize(self, ids: Sequence[int]) -> str:
        answer = await self.http.request("POST", "/detokenize", {"tokens": list(ids)})
        return str(answer.get("content", ""))

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """Each id's text by ``/detokenize`` (one request per id not asked before, concurrent;
        kept for the session: a vocabulary does not change)."""
        missing = sorted({i for i in ids if i not in self._pieces})
        found = await asyncio.gather(*(self.detokenize([i]) for i in missing))
        self._pieces.update(zip(missing, (str(p) for p in found), strict=True))
        return [self._pieces[i] for i in ids]

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        if self.chat:
            chat = PromptInput(user_text, None, True, system=system, thinking=thinking)
            return await self._render_chat(chat)
        text = f"{system}\n\n{user_text}" if system else user_text
        return await self._rendered(
            text, PromptInput(text, None, False, system=system, thinking=thinking)
        )

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """Chat: ``/apply-template`` over every turn and the tools (the server's template,
        ``--jinja``), tokenized as :meth:`render` tokenizes; raw text has no turns and no
        tools (only a ``[system?, user]`` list)."""
        if self.chat:
            return await self._render_chat(chat_input(messages, thinking, tools, tool_choice))
        if tools:
            raise self.no_tools(
                tools,
                "it sends raw text (chat: false); with chat: true its /apply-template renders "
                "them (the server needs --jinja)",
            )
        return await super().render_messages(messages, thinking)

    async def _render_chat(self, chat: PromptInput) -> PromptInput:
        """``chat``'s messages through the server's template, tokenized."""
        return await self._rendered(await self._apply_template(chat), chat)

    async def _rendered(self, text: str, asked: PromptInput) -> PromptInput:
        """``text`` (rendered for ``asked``) with its ids."""
        # Tokenized as the server tokenizes its own prompts, BOS added when the vocabulary
        # says so: ``/apply-template`` drops a template's leading BOS (Llama 3's
        # ``<|begin_of_text|>``) because the tokenizer adds it back.
        ids = await self._tokenize(text, add_special=True)
        if self._adds_bos_only:
            # The rendered text is the exact string of the ids: spell out the BOS.
            text = str(self.props.get("bos_token", "")) + text
        return dataclasses.replace(asked, text=text, token_ids=tuple(ids), templated=self.chat)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        if prompt.token_ids is None:
            return False
        # A rendered text is the exact string of its ids (special tokens spelled out).
        ids = await self._tokenize(prompt.text, add_special=False)
        return tuple(ids) == prompt.token_ids

    async def _apply_template(self, prompt: PromptInput) -> str:
        """The chat template applied by the server to ``prompt``'s messages (cached)."""
        key = prompt.key()
        if key not in self._templated:
            answer = await self.http.request(
                "POST",
                "/apply-template",
                {
                    "messages": chat_messages(prompt),
                    "chat_template_kwargs": {"enable_thinking": prompt.thinking},
                    **tool_fields(prompt, choice=False),
                },
            )
            self._templated[key] = str(answer["prompt"])
        return self._templated[key]

    def _body(self, prompt: PromptInput, params: GenerationParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "prompt": list(prompt.token_ids) if prompt.token_ids is not None else prompt.text,
            "n_predict": params.max_tokens,
            "temperature": params.temperature,
            "n_probs": params.logprobs or TOP_K,
            "return_tokens": True,
            "cache_prompt": False,
            **llama_fields(params),
        }
        if params.seed is not None:
            body["seed"] = params.seed
        return body

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return await self._generate(self._body(prompt, params))

    async def generate_base(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` with every adapter's ``lora`` scale 0: the base model."""
        zero = [{"id": e.get("id"), "scale": 0.0} for e in self.loras]
        return await self._generate({**self._body(prompt, params), "lora": zero})

    async def generate_uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` (``cache_prompt: false``: no slot state reused)."""
        return await self.generate(prompt, params)

    async def generate_cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` with ``cache_prompt: true``: the slot's (and ``--cache-ram``'s)
        cached prefix is reused; ``timings.cache_n`` says how many prompt tokens were."""
        return await self._generate({**self._body(prompt, params), "cache_prompt": True})

    async def _generate(self, body: dict[str, Any]) -> Generation:
        """One ``/completion`` request; an ``n_cmpl > 1`` request is answered with a list of
        completions (the first is the generation, the others its ``others``)."""
        started = time.perf_counter()
        answer = await self.http.request("POST", "/completion", body)
        answers = answer if isinstance(answer, list) else [answer]
        if not answers or not all(isinstance(a, dict) for a in answers):
            raise BackendError(f"backend {self.name!r}: /completion answered {str(answer)[:200]}")
        generation, *others = (self._completion(a) for a in answers)
        generation.others = tuple(others)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body.get("prompt")))

    def _completion(self, answer: dict[str, Any]) -> Generation:
        """One completion of a ``/completion`` answer."""
        generation = native_generation(
            str(answer.get("content", "")),
            [int(t) for t in answer.get("tokens") or []],
            answer.get("completion_probabilities") or [],
            answer.get("stop_type"),
        )
        timings = answer.get("timings")
        generation.cached_tokens = (
            _count(timings.get("cache_n")) if isinstance(timings, dict) else None
        )
        generation.prompt_tokens = _count(answer.get("tokens_evaluated"))
        generation.completion_tokens = _count(answer.get("tokens_predicted"))
        if self.features:
            generation.activity = timings_activity(timings)
        return generation

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """The same ``/completion`` request with ``stream: true``, assembled from its chunks."""
        started = time.perf_counter()
        body = {**self._body(prompt, params), "stream": True}
        parts: dict[int, StreamedCompletion] = {}
        async for chunk in self.http.stream("/completion", body):
            index = chunk.get("index", 0) if isinstance(chunk, dict) else 0
            index = index if isinstance(index, int) else 0
            parts.setdefault(index, StreamedCompletion()).add(chunk)
        parts = parts or {0: StreamedCompletion()}
        first, *others = (parts[i].generation() for i in sorted(parts))
        first.others = tuple(others)
        if self.features:
            first.activity = timings_activity(parts[min(parts)].timings)
        first.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, first, sent_ids(body.get("prompt")))

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        """``prompt``'s messages through ``completions`` (the server's template applied by
        ``/apply-template``), ``chat`` or ``messages``; greedy, no prompt cache."""
        started = time.perf_counter()
        common = {
            "cache_prompt": False,
            **({"seed": params.seed} if params.seed else {}),
            **openai_fields(params, TAKEN["llama-server"]),
        }
        if endpoint == "completions":
            text = await self._apply_template(prompt)
            body = {
                "prompt": text,
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                **common,
            }
            generation = parse_choice(
                await self.http.request("POST", "/v1/completions", body), chat=False
            )
            generation.prompt_text = text
        elif endpoint == "chat":
            body = {
                "messages": chat_messages(prompt),
                "max_tokens": params.max_tokens,
                "temperature": params.temperature,
                "chat_template_kwargs": {"enable_thinking": prompt.thinking},
                **tool_fields(prompt),
                **common,
            }
            generation = parse_choice(
                await self.http.request("POST", "/v1/chat/completions", body), chat=True
            )
        elif endpoint == "messages":
            body = {**messages_payload(prompt, params, None), **common}
            generation = parse_message(await self.http.request("POST", "/v1/messages", body))
        else:
            return await super().generate_via(endpoint, prompt, params)
        generation.elapsed_s = time.perf_counter() - started
        why = f"the prompt goes to {endpoint} as text (the server's template applied)"
        return check_prompt_count(self, generation, None, why=why)

    async def send_hostile(self, kind: str) -> str:
        def body(text: str, max_tokens: int) -> dict[str, Any]:
            return {"prompt": text, "n_predict": max_tokens, "temperature": 0}

        settings = self.props.get("default_generation_settings") or {}
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        return await send_hostile(
            self.http, kind, "/completion", body, n_ctx=n_ctx if isinstance(n_ctx, int) else None
        )

    async def probe_abilities(self, topic: str) -> Abilities:
        """``generation-paths``: its streamed ``/completion`` and its ``/v1/completions``,
        ``/v1/chat/completions`` and ``/v1/messages``, one one-token request each
        (:mod:`.endpoint_probe`); ``structured``: its structured paths
        (:meth:`probe_structured`)."""
        if topic == GENERATION_PATHS:
            return await probe_generation_paths(self)
        if topic == STRUCTURED:
            return await self.probe_structured()
        if topic == REQUEST_PARAMS:
            return await probe_request_params(self, taken(self.kind, self.chat))
        return Abilities()

    async def alive(self) -> bool:
        return await probe_alive(
            self.http, "/health", lambda doc: isinstance(doc, dict) and doc.get("status") == "ok"
        )

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """One request per position (concurrent, bounded); rows are full-vocab logprobs."""
        if not continuation_ids:
            return np.zeros((0, self.n_vocab), dtype=np.float32)
        prefixes = [[*prompt_ids, *continuation_ids[:i]] for i in range(len(continuation_ids))]
        rows = await asyncio.gather(*(self._full_row(p) for p in prefixes))
        return np.stack(rows)

    async def _full_row(self, prefix: list[int]) -> np.ndarray:
        """The full-vocabulary logprobs of the token after ``prefix``: ``n_predict: 1``,
        ``n_probs`` = V and an ASCII token forced (no UTF-8 gap loses the entry; the
        distribution is reported before the bias)."""
        body: dict[str, Any] = {
            "prompt": prefix,
            "n_predict": 1,
            "temperature": 0,
            "n_probs": self.n_vocab,
            "cache_prompt": False,
            "logit_bias": [[self._forced_token, 100.0]] if self._forced_token else [],
        }
        answer = await self.http.request("POST", "/completion", body)
        self._scored_whole(answer, len(prefix))
        row = np.full(self.n_vocab, -np.inf, dtype=np.float32)
        entries = answer.get("completion_probabilities") or []
        if not entries:
            raise BackendError(
                f"backend {self.name!r}: no probabilities after a prefix of {len(prefix)} ids"
            )
        for item in entries[0].get("top_logprobs") or []:
            row[int(item["id"])] = float(item["logprob"])
        return row

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        """At every position of ``continuation_ids``, the logprob of its token and the top
        :data:`TOP_K`, at any vocabulary size: one request per position (concurrent), the
        prefix as ids, ``n_predict: 1`` and a ``logit_bias`` forcing the continuation's token,
        whose entry then carries its logprob and the top k of the distribution before the
        bias. A token that ends inside a UTF-8 character gets no entry; that position is
        asked again with an ASCII token forced and the full row (``n_probs`` = V), rare."""

        async def position(i: int) -> TopKRow:
            token = continuation_ids[i]
            body: dict[str, Any] = {
                "prompt": [*prompt_ids, *continuation_ids[:i]],
                "n_predict": 1,
                "temperature": 0,
                "n_probs": TOP_K,
                "cache_prompt": False,
                "logit_bias": [[token, 100.0]],
            }
            answer = await self.http.request("POST", "/completion", body)
            self._scored_whole(answer, len(body["prompt"]))
            entries = answer.get("completion_probabilities") or []
            if entries and int(entries[0].get("id", -1)) == token:
                top = {int(t["id"]): float(t["logprob"]) for t in entries[0]["top_logprobs"]}
                return TopKRow(float(entries[0]["logprob"]), top)
            row = await self._full_row([*prompt_ids, *continuation_ids[:i]])
            best = np.argsort(-row, kind="stable")[:TOP_K]
            return TopKRow(float(row[token]), {int(v): float(row[v]) for v in best})

        return list(await asyncio.gather(*(position(i) for i in range(len(continuation_ids)))))

    def _scored_whole(self, answer: Any, sent: int) -> None:
        """Raise :class:`~.prompt_count.PromptTruncated` when a scoring request's answer
        counts fewer prompt tokens (``tokens_evaluated``) than its ``sent`` prefix ids."""
        counted = _count(answer.get("tokens_evaluated")) if isinstance(answer, dict) else None
        if truncated(counted, sent):
            assert counted is not None
            raise PromptTruncated(self.name, counted, sent)

    async def processed_probs(
        self, prompt: PromptInput, params: GenerationParams
    ) -> dict[int, float] | None:
        """``post_sampling_probs: true`` with ``n_probs`` = V and ``n_predict`` 1: the
        probabilities after the sampler chain (its support only), by id; None when the
        answer has no entry (a token ending inside a UTF-8 character has none)."""
        body = {
            **self._body(prompt, dataclasses.replace(params, max_tokens=1, n=1)),
            "n_probs": self.n_vocab,
        }
        answer = await self.http.request(
            "POST", "/completion", {**body, "post_sampling_probs": True}
        )
        entries = answer.get("completion_probabilities") if isinstance(answer, dict) else None
        if not entries:
            return None
        return {int(t["id"]): float(t["prob"]) for t in entries[0].get("top_probs") or []}

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "build_info": self.props.get("build_info"),
            "model_path": self.props.get("model_path"),
            "n_vocab": self.n_vocab,
            **({"adapter": self.adapter} if self.adapter is not None else {}),
            **({"lora": self.http.post_fields.get("lora")} if self.loras else {}),
        }

    def structured_paths(self) -> tuple[StructuredPath, ...]:
        """Every structured path: llama-server has ``/v1/chat/completions`` and
        ``/v1/messages`` (llama.cpp of llama-cpp-python 0.3.36). Measured on that build:

        - ``n`` above its ``-np`` slots is refused (HTTP 400 "Field 'n': Value must be
          between 1 <= value <= 1": unsupported); with ``-np 2``, ``n: 2`` answers two
          choices whose ``usage.completion_tokens`` counts one of them (a stream sends one
          usage chunk per choice);
        - tools need its Jinja templates (``--jinja``, on by default in this build;
          ``--no-jinja`` makes a request with tools a 400); a named ``tool_choice`` object
          is ignored with a warning in its log (read as ``auto``: asked for ``get_date``,
          the tool model calls ``get_weather``), on ``/v1/messages`` so are ``{type:
          tool}`` and ``{type: none}``; ``tool_choice: none`` on chat leaves the model's
          call unparsed in ``content`` (``finish_reason: stop``);
        - output after a call that the template's parser cannot read is HTTP 500 ("The
          model produced output that does not match the expected peg-native format"), an
          error, not an answer;
        - ``/v1/messages`` counts a cached prompt as ``input_tokens`` plus
          ``cache_read_input_tokens``."""
        return ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")

    async def structured(
        self, request: StructuredRequest, path: StructuredPath
    ) -> StructuredResponse:
        """``request`` through ``path`` (:class:`~..structured.client.ChatServerClient`;
        llama-server serves one model: no ``model`` sent)."""
        from ..structured.client import ChatServerClient

        client = ChatServerClient(self.http, None, self.structured_paths())
        return await client.structured(request, path)

    async def probe_structured(self) -> Abilities:
        """The structured paths the server offers and lacks: one minimal request per path
        (:func:`~..structured.probe.probe_paths`). Measured on llama-cpp-python 0.3.36's
        llama.cpp: every path answers; ``n: 2`` with one slot (``-np 1``) is HTTP 400
        "Field 'n': Value must be between 1 <= value <= 1" where ``chat`` answered:
        ``chat-n2`` lacking; with two slots it answers two choices: offered."""
        from ..structured.probe import probe_paths

        return await probe_paths(self)

    async def aclose(self) -> None:
        await self.http.aclose()

    async def special_tokens(self, ids: Sequence[int]) -> set[int]:
        """The ids among ``ids`` whose text (``/detokenize``) does not tokenize back to the id
        with ``parse_special: false``: llama.cpp's control (and user-defined special)
        tokens; a piece that is part of a character (U+FFFD) is a byte token, never one."""
        distinct = sorted(set(ids))
        pieces = await self.token_pieces(distinct)

        async def literal(text: str) -> list[int]:
            answer = await self.http.request(
                "POST", "/tokenize", {"content": text, "add_special": False, "parse_special": False}
            )
            return [int(t) for t in answer["tokens"]]

        literals = await asyncio.gather(*(literal(p) for p in pieces))
        return {
            i
            for i, piece, back in zip(distinct, pieces, literals, strict=True)
            if back != [i] and "\ufffd" not in piece  # a byte of a character is no control
        }


def create(
    name: str,
    spec: LlamaServerSpec,
    source: str,
    revision: str | None,
    url: str | None,
    adapter: str | None = None,
) -> LlamaServerBackend:
    """The ``llama-server`` backend of a ``backends:`` entry (see :mod:`.registry`); the
    server was given the model (``source``, its gguf) and its adapters (``--lora``) by its
    own command line; ``adapter`` is the one this backend's requests apply."""
    settings = HttpSettings.of(spec, url)
    return LlamaServerBackend(name, settings, chat=bool(spec.chat), adapter=adapter)
