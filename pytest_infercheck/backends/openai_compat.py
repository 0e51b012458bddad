"""Any OpenAI-compatible server: vLLM, SGLang, llama-server's /v1, mlx_lm.server, Ollama's /v1.

``/v1/chat/completions`` by default (the server applies its chat template), or
``/v1/completions`` with ``chat: false`` (the prompt is sent as raw text). Greedy
(``temperature: 0``).

Logprobs are negotiated once per server and endpoint (:meth:`OpenAICompatBackend.
negotiate_logprobs`, at readiness for the backend's own endpoint): the documented request
shapes are tried in order with a one-token probe, integer ``logprobs: k`` (completions only)
then ``logprobs: true`` with ``top_logprobs: k``; the first whose answer carries logprobs is
used for every request (mlx_lm.server answers the integer with HTTP 400 "logprobs must be of
type bool" and gives top-k for the second). The outcome, and why no shape worked (the
server's status and message per shape), is a :class:`LogprobNegotiation` in ``observed``
(the identity) and :meth:`OpenAICompatBackend.logprob_unavailable_reason`. A server that
later answers without logprobs is recorded too, never reported as a silent None. What comes
back is checked by :func:`~pytest_infercheck.metrics.consistency.generation_faults`.

Both logprob shapes are parsed: the chat/new shape ``logprobs.content[{token, logprob,
top_logprobs}]`` and the legacy completions shape ``logprobs.{tokens, token_logprobs,
top_logprobs}``. When every entry and every top-k entry carries an integer ``id``
(mlx_lm.server, llama-server's ``/v1``), those are the generation's token ids (the server's
own) and the top-k maps are keyed by them; else by token text.

``model`` is the name sent in requests (``model_name``, default the model's source);
``source`` is the model's folder, read for the chat template and ``config.json``.

Thinking is suppressed with ``chat_template_kwargs.enable_thinking`` and a returned
reasoning chain (``reasoning_content``/``reasoning`` or a ``<think>`` block) is split from
the answer and kept in ``Generation.reasoning``.

Streaming (``stream: true``) is assembled from the SSE chunks' ``text`` / ``delta.content``
and their logprobs (servers that stream none give none). :meth:`generate_via` reaches
``completions`` and ``chat`` whatever ``chat:`` says; ``completions`` then gets the chat
template rendered once, in-process, by the served model folder's tokenizer (the server's own
template, so the endpoints see the same input). ``messages`` (Anthropic) is for the
subclasses whose server offers it. Hostile requests go to the backend's own endpoint.

Structured requests (:mod:`~..structured.client`): every path, ``chat``, ``chat-stream``,
``chat-n2``, ``messages``, ``messages-stream``; which of them the server offers is probed
before a check's requests (:meth:`OpenAICompatBackend.probe_abilities`, one minimal request
per path: :mod:`~..structured.probe`), for every kind built on this one (vLLM, vllm-mlx,
SGLang, ``openai``). Measured: vLLM 0.32 (CPU) offers every path but refuses ``n: 2`` at
temperature 0 (HTTP 400 "n must be 1 when using greedy sampling"); vllm-mlx 0.6.0 offers every
path and ignores ``n`` (one choice back); mlx_lm.server (0.32.2) parses tool calls itself
when the model's template names a format it knows (``<tool_call>`` with ``tool_call.name``:
its ``json_tools`` parser), ignores ``n`` and ``response_format``, and has no
``/v1/messages`` (404): both ``messages`` paths are lacking.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

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
    chat_input,
    single_turn,
)
from .capabilities import GENERATION_PATHS, REQUEST_PARAMS, STRUCTURED, TOKENIZE_TOPIC
from .endpoint_probe import TOKENIZE, lacking_evidence, probe_generation_paths, probe_request_params
from .hostile import probe_alive, send_hostile
from .http import HttpClient, HttpError, HttpSettings, error_message
from .openai_logprobs import BOOL_TOP as BOOL_TOP
from .openai_logprobs import INTEGER as INTEGER
from .openai_logprobs import PROBE_PROMPT, SHAPES, logprob_fields
from .openai_logprobs import LogprobNegotiation as LogprobNegotiation
from .openai_logprobs import ShapeTried as ShapeTried
from .openai_wire import STREAM_USAGE
from .openai_wire import anthropic_messages as anthropic_messages
from .openai_wire import assemble_chunks as assemble_chunks
from .openai_wire import chat_endpoint as chat_endpoint
from .openai_wire import chat_messages as chat_messages
from .openai_wire import chat_path as chat_path
from .openai_wire import delta_calls as delta_calls
from .openai_wire import message_calls as message_calls
from .openai_wire import messages_payload as messages_payload
from .openai_wire import parse_choice as parse_choice
from .openai_wire import parse_logprobs as parse_logprobs
from .openai_wire import parse_message as parse_message
from .openai_wire import read_usage as read_usage
from .openai_wire import text_generation as text_generation
from .openai_wire import tool_fields as tool_fields
from .params import openai_fields, taken
from .prompt_count import AS_TEXT, check_prompt_count

if TYPE_CHECKING:
    from ..structured.records import Path as StructuredPath
    from ..structured.records import StructuredRequest, StructuredResponse
    from .spec import OpenAIServerSpec

TOP_K = 5
B = TypeVar("B", bound="OpenAICompatBackend")


class OpenAICompatBackend(Backend):
    """A server speaking the OpenAI API."""

    kind = "openai"
    no_logprobs: str = ""
    """Set by a kind whose servers are known to return no logprobs: why (then none are
    asked for, nor negotiated)."""

    def __init__(
        self,
        name: str,
        settings: HttpSettings,
        *,
        model: str | None,
        chat: bool = True,
        top_k: int = TOP_K,
        source: str | None = None,
    ) -> None:
        super().__init__(name)
        self.http = HttpClient(name, settings)
        self.concurrency = settings.max_concurrency
        self.model = model
        """The ``model`` sent in requests (the served model's name)."""
        self.source = source
        """The model's source (a folder on this machine, or a hub name), when it differs
        from :attr:`model`: read for the chat template and ``config.json``."""
        self.chat = chat
        self.top_k = top_k
        self.observed: dict[str, Any] = {}
        """Capabilities learned from the server's answers (e.g. ``logprobs: False``,
        ``logprobs_shape``)."""
        self.negotiated: dict[bool, LogprobNegotiation] = {}
        """The logprob negotiation of each endpoint used so far (by ``chat``)."""
        self._templated: dict[str, str] = {}

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        logprobs = self.observed.get("logprobs", True)
        return Capabilities(
            top_k_logprobs=self.top_k if logprobs else 0,
            chat_template=self.chat,
        )

    async def ensure_ready(self) -> None:
        """Negotiate the logprobs of the backend's own endpoint."""
        await self.negotiate_logprobs(self.chat)

    async def negotiate_logprobs(self, chat: bool) -> LogprobNegotiation:
        """Try the logprob shapes of the endpoint (:data:`SHAPES`) with a one-token greedy
        probe, in order, until one answers with logprobs; record the outcome (in
        ``observed`` for the backend's own endpoint) and return it. A shape answered with an
        HTTP 4xx is recorded with the server's message and the next is tried; any other
        failure is the server's and raised."""
        if self.no_logprobs:
            return self._record(
                LogprobNegotiation(chat_endpoint(chat), None, declared=self.no_logprobs)
            )
        tried: list[ShapeTried] = []
        prompt = PromptInput(PROBE_PROMPT, None, templated=chat)
        for shape in SHAPES[chat]:
            body = {**self._payload(prompt, GenerationParams(1), chat, shape=None)}
            body.update(logprob_fields(shape, self.top_k))
            try:
                answer = await self.http.request("POST", chat_path(chat), body)
            except HttpError as exc:
                if exc.status is None or not 400 <= exc.status < 500:
                    raise
                tried.append(ShapeTried(shape, f"HTTP {exc.status}: {error_message(exc.body)}"))
                continue
            if parse_choice(answer, chat=chat).chosen_logprobs is None:
                tried.append(ShapeTried(shape, "answered without logprobs"))
                continue
            tried.append(ShapeTried(shape, "logprobs"))
            return self._record(LogprobNegotiation(chat_endpoint(chat), shape, tuple(tried)))
        return self._record(LogprobNegotiation(chat_endpoint(chat), None, tuple(tried)))

    def _record(self, negotiation: LogprobNegotiation) -> LogprobNegotiation:
        chat = negotiation.endpoint == "chat"
        self.negotiated[chat] = negotiation
        if chat == self.chat:
            self.observed["logprobs"] = negotiation.shape is not None
            self.observed["logprobs_shape"] = negotiation.shape
            reason = negotiation.reason()
            if reason is not None:
                self.observed["logprobs_note"] = reason
            else:
                self.observed.pop("logprobs_note", None)
        return negotiation

    def logprob_unavailable_reason(self) -> str | None:
        """Why the backend's own endpoint gives no logprobs (the negotiation's outcome, or a
        later answer without them); None when it gives them or nothing was asked yet."""
        note = self.observed.get("logprobs_note")
        if note is not None:
            return str(note)
        return "logprobs not returned" if self.observed.get("logprobs") is False else None

    async def _shape(self, chat: bool) -> str | None:
        """The negotiated logprob shape of an endpoint (negotiated now on first use)."""
        negotiation = self.negotiated.get(chat)
        if negotiation is None:
            negotiation = await self.negotiate_logprobs(chat)
        return negotiation.shape

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
        """Chat: every turn, sent as the request's messages with the tools (the server
        templates them). Raw: only a ``[system?, user]`` list without tools (raw text has
        no turns and no tools)."""
        if self.chat:
            return chat_input(messages, thinking, tools, tool_choice)
        if single_turn(messages) is None:
            raise self.no_conversation(messages, "it sends raw text (chat: false), without turns")
        if tools:
            raise self.no_tools(tools, "it sends raw text (chat: false), without tools")
        return await super().render_messages(messages, thinking)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        """In raw mode the baseline's rendered text is sent as it is (the exact string of its
        ids, e.g. with ``<s>``, which servers parse as the special token); in chat mode the
        server applies its own template, so nothing rendered elsewhere is taken."""
        return not self.chat and prompt.token_ids is not None

    def _payload(
        self,
        prompt: PromptInput,
        params: GenerationParams,
        chat: bool | None = None,
        *,
        shape: str | None = None,
    ) -> Any:
        """The request body of a greedy generation; ``shape``: the logprob fields asked
        (:func:`logprob_fields`; None: none)."""
        chat = self.chat if chat is None else chat
        body: dict[str, Any] = {
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "stream": False,
        }
        if self.model is not None:
            body["model"] = self.model
        if params.seed is not None:
            body["seed"] = params.seed
        if chat:
            body["messages"] = chat_messages(prompt)
            body["chat_template_kwargs"] = {"enable_thinking": prompt.thinking}
            body.update(tool_fields(prompt))
        else:
            body["prompt"] = prompt.text
        body.update(openai_fields(params, taken(self.kind, chat)))
        body.update(logprob_fields(shape, params.logprobs or self.top_k))
        return body

    @property
    def _path(self) -> str:
        return chat_path(self.chat)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return await self._generate(prompt, params, self.chat)

    async def _generate(
        self, prompt: PromptInput, params: GenerationParams, chat: bool
    ) -> Generation:
        shape = await self._shape(chat)
        started = time.perf_counter()
        body = self._payload(prompt, params, chat, shape=shape)
        answer = await self.http.request("POST", chat_path(chat), body)
        generation = parse_choice(answer, chat=chat)
        if shape is not None and generation.chosen_logprobs is None:
            # Negotiated, then answered without: recorded, asked no more.
            tried = (*self.negotiated[chat].tried, ShapeTried(shape, "a generation without"))
            self._record(LogprobNegotiation(chat_endpoint(chat), None, tried))
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, None, why=AS_TEXT)

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        shape = await self._shape(self.chat)
        started = time.perf_counter()
        body = {**self._payload(prompt, params, shape=shape), **STREAM_USAGE}
        chunks = [event async for event in self.http.stream(self._path, body)]
        generation = assemble_chunks(chunks, chat=self.chat)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, None, why=AS_TEXT)

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        """``chat``: the messages to ``/v1/chat/completions``; ``completions``: the same
        messages rendered by the chat template (once) to ``/v1/completions``."""
        if endpoint == "chat":
            return await self._generate(prompt, params, chat=True)
        if endpoint == "completions":
            text = await self.templated_text(prompt)
            raw = PromptInput(text, None, templated=True, thinking=prompt.thinking)
            generation = await self._generate(raw, params, chat=False)
            generation.prompt_text = text
            return generation
        return await super().generate_via(endpoint, prompt, params)

    async def templated_text(self, prompt: PromptInput) -> str:
        """``prompt``'s messages rendered by the chat template of the served model folder
        (transformers' ``apply_chat_template``, with the generation prompt), cached."""
        key = prompt.key()
        if key not in self._templated:
            folder = self.model_folder()
            if folder is None:
                raise BackendError(
                    f"backend {self.name!r} ({self.kind}): cannot render the chat template "
                    f"for /v1/completions: the model {self.source or self.model!r} is not a "
                    "local folder"
                )
            try:
                from transformers import AutoTokenizer
            except ImportError as exc:
                raise BackendError(
                    f"backend {self.name!r}: rendering the chat template needs transformers"
                ) from exc
            tokenizer = AutoTokenizer.from_pretrained(str(folder))
            if not getattr(tokenizer, "chat_template", None):
                raise BackendError(
                    f"backend {self.name!r} ({self.kind}): the model {str(folder)!r} has no "
                    "chat template, so its chat endpoints have nothing to compare with"
                )
            self._templated[key] = str(
                tokenizer.apply_chat_template(
                    chat_messages(prompt, object_arguments=True),
                    tokenize=False,
                    add_generation_prompt=True,
                    enable_thinking=prompt.thinking,
                    **tool_fields(prompt, choice=False),
                )
            )
        return self._templated[key]

    def model_folder(self) -> Path | None:
        """The served model's local folder: :attr:`source` (else :attr:`model`), when it
        names one; never looked up by the served name alone when a source is known."""
        where = self.source or self.model
        folder = Path(where).expanduser() if where else None
        return folder if folder is not None and folder.is_dir() else None

    def model_config(self) -> dict[str, Any]:
        """The served model folder's ``config.json`` ({} when the model is not a local folder
        or the file is unreadable)."""
        folder = self.model_folder()
        try:
            config = json.loads((folder / "config.json").read_text()) if folder else {}
        except (OSError, ValueError):
            return {}
        return config if isinstance(config, dict) else {}

    def context_size(self) -> int | None:
        """The model's context length from its local ``config.json``, when known."""
        value = self.model_config().get("max_position_embeddings")
        return int(value) if isinstance(value, int) else None

    def config_vocab_size(self) -> int | None:
        """``vocab_size`` of the local ``config.json`` (the width of the logits; a
        multimodal model's ``text_config``), None when unknown."""
        config = self.model_config()
        text = config.get("text_config")
        value = config.get("vocab_size", text.get("vocab_size") if isinstance(text, dict) else None)
        return value if isinstance(value, int) and value > 0 else None

    async def send_hostile(self, kind: str) -> str:
        def body(text: str, max_tokens: int) -> dict[str, Any]:
            prompt = PromptInput(text, None, templated=self.chat)
            payload: dict[str, Any] = self._payload(prompt, GenerationParams(max_tokens))
            return payload

        return await send_hostile(self.http, kind, self._path, body, n_ctx=self.context_size())

    async def alive(self) -> bool:
        return await probe_alive(self.http, "/v1/models", lambda doc: isinstance(doc, dict))

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "model": self.model,
            **({"source": self.source} if self.source not in (None, self.model) else {}),
            "observed": dict(self.observed),
        }

    async def aclose(self) -> None:
        await self.http.aclose()

    async def probe_abilities(self, topic: str) -> Abilities:
        """``generation-paths``: its streamed request, its ``completions``, ``chat`` and
        (where the kind has a client for it) ``messages`` endpoints, one minimal request each
        (:mod:`.endpoint_probe`); ``tokenize``: a vLLM-style ``POST /tokenize``
        (``tokenize-endpoint``, also recorded as ``observed["tokenize"]``), judged lacking
        only when the server answers ``GET /v1/models`` (it is up); ``structured``: its
        structured paths (:meth:`probe_structured`)."""
        if topic == GENERATION_PATHS:
            return await probe_generation_paths(self)
        if topic == TOKENIZE_TOPIC:
            return await self.probe_tokenize(answered=await self.alive())
        if topic == STRUCTURED:
            return await self.probe_structured()
        if topic == REQUEST_PARAMS:
            return await probe_request_params(self, taken(self.kind, self.chat))
        return Abilities()

    async def probe_tokenize(self, answered: bool = True) -> Abilities:
        """``tokenize-endpoint``: offered when ``POST /tokenize`` answers ids, lacking when
        it answers 404/405/501 and the server ``answered`` another probe (then
        ``observed["tokenize"]`` is False and :meth:`prompt_ids` gives None), else not
        probed (:mod:`.endpoint_probe`)."""
        try:
            await self._tokenize_ids(PromptInput("Hi", None, templated=self.chat))
        except BackendError as exc:
            evidence = lacking_evidence("POST /tokenize", exc)
            if evidence is None or not answered:
                return Abilities()
            self.observed["tokenize"] = False
            return Abilities(lacking={TOKENIZE: evidence})
        return Abilities(frozenset({TOKENIZE}))

    async def prompt_ids(self, prompt: PromptInput) -> list[int] | None:
        """The server's own ids of ``prompt`` from a vLLM-style ``POST /tokenize`` (chat: the
        messages with the generation prompt; raw: the text, special tokens added as for a
        completion); None when the probe (:meth:`probe_abilities`) found it lacking
        (``observed["tokenize"] = False``). Any failure of the request is raised."""
        if self.observed.get("tokenize") is False:
            return None
        return await self._tokenize_ids(prompt)

    async def _tokenize_ids(self, prompt: PromptInput) -> list[int]:
        body: dict[str, Any] = {"model": self.model} if self.model is not None else {}
        if self.chat:
            body["messages"] = chat_messages(prompt)
            body["add_generation_prompt"] = True
            body["chat_template_kwargs"] = {"enable_thinking": prompt.thinking}
        else:
            body["prompt"] = prompt.text
        answer = await self.http.request("POST", "/tokenize", body)
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(
                f"backend {self.name!r}: /tokenize answered without tokens: {str(answer)[:200]!r}"
            )
        self.observed["tokenize"] = True
        return [int(t) for t in tokens]

    async def prompt_token_count(self, prompt: PromptInput) -> int | None:
        """``usage.prompt_tokens`` of a one-token greedy generation of ``prompt`` through the
        backend's own endpoint (no logprobs asked); None when the answer has no usage."""
        body = self._payload(prompt, GenerationParams(max_tokens=1))
        answer = await self.http.request("POST", self._path, body)
        usage = answer.get("usage") if isinstance(answer, dict) else None
        count = usage.get("prompt_tokens") if isinstance(usage, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    structured_offer: tuple[StructuredPath, ...] = (
        "chat",
        "chat-stream",
        "chat-n2",
        "messages",
        "messages-stream",
    )
    """The structured paths the client sends to the kind's servers; which of them a server
    offers is probed (:meth:`probe_abilities`)."""

    def structured_paths(self) -> tuple[StructuredPath, ...]:
        """The :class:`~..structured.records.StructuredChat` paths the client sends."""
        return self.structured_offer

    async def probe_structured(self) -> Abilities:
        """The structured paths the server offers and lacks: one minimal request per path
        (:func:`~..structured.probe.probe_paths`; what is measured per engine: the module
        docstring)."""
        from ..structured.probe import probe_paths

        return await probe_paths(self)

    async def structured(
        self, request: StructuredRequest, path: StructuredPath
    ) -> StructuredResponse:
        """``request`` through ``path`` (:class:`~..structured.client.ChatServerClient`),
        with the backend's ``model`` name."""
        from ..structured.client import ChatServerClient

        client = ChatServerClient(self.http, self.model, self.structured_paths())
        return await client.structured(request, path)


def create(
    name: str, spec: OpenAIServerSpec, source: str, revision: str | None, url: str | None
) -> OpenAICompatBackend:
    """The ``openai`` backend of a ``backends:`` entry (see :mod:`.registry`)."""
    return create_served(OpenAICompatBackend, name, spec, source, url)


def create_served(
    cls: Callable[..., B], name: str, spec: OpenAIServerSpec, source: str, url: str | None
) -> B:
    """A server backend of class ``cls`` (an :class:`OpenAICompatBackend`) for a
    ``backends:`` entry: it asks for the model ``model_name`` (default: the model's source)
    through the chat endpoints (unless ``chat: false``); the source stays its model folder."""
    chat = True if spec.chat is None else spec.chat
    backend = cls(
        name,
        HttpSettings.of(spec, url),
        model=spec.model_name or source,
        chat=chat,
        source=source,
    )
    if not spec.logprobs:
        backend.no_logprobs = f"backend {name!r} has logprobs: false in the matrix: not asked"
    return backend
