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

Structured requests (:mod:`~..structured.client`): ``chat``, ``chat-stream``, ``chat-n2``
(:attr:`OpenAICompatBackend.structured_offer`; kinds whose servers have ``/v1/messages`` add
it). mlx_lm.server (0.32.2) parses tool calls itself when the model's template names a
format it knows (``<tool_call>`` with ``tool_call.name``: its ``json_tools`` parser), ignores
``n`` and ``response_format``, and has no ``/v1/messages`` (404).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ..metrics.consistency import unsorted_positions
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
    openai_messages,
    single_turn,
)
from .endpoint_probe import TOKENIZE, lacking_evidence, probe_generation_paths, union
from .hostile import probe_alive, send_hostile
from .http import HttpClient, HttpError, HttpSettings

if TYPE_CHECKING:
    from ..config import BackendSpec
    from ..structured.records import Path as StructuredPath
    from ..structured.records import StructuredRequest, StructuredResponse

TOP_K = 5
B = TypeVar("B", bound="OpenAICompatBackend")
THINK_BLOCK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


INTEGER = "integer"
"""``logprobs: k``: the legacy completions shape."""
BOOL_TOP = "bool+top_logprobs"
"""``logprobs: true, top_logprobs: k``: the chat shape, which some servers take on
``/v1/completions`` too."""
SHAPES = {False: (INTEGER, BOOL_TOP), True: (BOOL_TOP,)}
"""The logprob request shapes tried, in order, by endpoint (``chat``)."""
PROBE_PROMPT = "1"


@dataclass(frozen=True)
class ShapeTried:
    """One logprob request shape tried at negotiation, and what the server did."""

    shape: str
    outcome: str
    """``logprobs`` (it worked), ``HTTP 400: logprobs must be of type bool``, or ``answered
    without logprobs``."""


@dataclass(frozen=True)
class LogprobNegotiation:
    """Which logprob request shape a server's endpoint answers (:data:`INTEGER`,
    :data:`BOOL_TOP`), None when none; the shapes tried, in order."""

    endpoint: str
    shape: str | None
    tried: tuple[ShapeTried, ...] = ()
    declared: str = ""
    """Why nothing was tried: the backend kind is known to return no logprobs."""

    def reason(self) -> str | None:
        """Why there are no logprobs, in a sentence; None when a shape worked."""
        if self.shape is not None:
            return None
        if self.declared:
            return f"no logprobs from /v1/{self.endpoint} ({self.declared})"
        said = "; ".join(f"{t.shape}: {t.outcome}" for t in self.tried) or "not asked"
        return f"no logprobs from /v1/{self.endpoint} ({said})"

    def to_plain(self) -> dict[str, Any]:
        return {
            "endpoint": self.endpoint,
            "shape": self.shape,
            "tried": [{"shape": t.shape, "outcome": t.outcome} for t in self.tried],
            **({"declared": self.declared} if self.declared else {}),
        }


def logprob_fields(shape: str | None, top_k: int) -> dict[str, Any]:
    """The request fields of a logprob ``shape`` (none for None)."""
    if shape == INTEGER:
        return {"logprobs": top_k}
    if shape == BOOL_TOP:
        return {"logprobs": True, "top_logprobs": top_k}
    return {}


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
                tried.append(ShapeTried(shape, f"HTTP {exc.status}: {_message(exc.body)}"))
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
        body.update(logprob_fields(shape, self.top_k))
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
        return generation

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        shape = await self._shape(self.chat)
        started = time.perf_counter()
        body = {**self._payload(prompt, params, shape=shape), "stream": True}
        chunks = [event async for event in self.http.stream(self._path, body)]
        generation = assemble_chunks(chunks, chat=self.chat)
        generation.elapsed_s = time.perf_counter() - started
        return generation

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

    async def probe_abilities(self) -> Abilities:
        """Its streamed request, its ``completions``, ``chat`` and (where the kind has a
        client for it) ``messages`` endpoints, and a vLLM-style ``POST /tokenize``
        (``tokenize-endpoint``, also recorded as ``observed["tokenize"]``), one minimal
        request each (:mod:`.endpoint_probe`)."""
        paths = await probe_generation_paths(self)
        return union(paths, await self.probe_tokenize(answered=bool(paths.offered)))

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

    structured_offer: tuple[StructuredPath, ...] = ("chat", "chat-stream", "chat-n2")
    """The structured paths the kind's servers have endpoints for (a kind whose servers
    have ``/v1/messages`` adds ``messages`` and ``messages-stream``). A request a server
    then refuses (``n: 2`` where it allows one choice) is unsupported, answered by the
    server itself."""

    def structured_paths(self) -> tuple[StructuredPath, ...]:
        """The :class:`~..structured.records.StructuredChat` paths offered."""
        return self.structured_offer

    async def structured(
        self, request: StructuredRequest, path: StructuredPath
    ) -> StructuredResponse:
        """``request`` through ``path`` (:class:`~..structured.client.ChatServerClient`),
        with the backend's ``model`` name."""
        from ..structured.client import ChatServerClient

        client = ChatServerClient(self.http, self.model, self.structured_paths())
        return await client.structured(request, path)


def create(
    name: str, spec: BackendSpec, source: str, revision: str | None, url: str | None
) -> OpenAICompatBackend:
    """The ``openai`` backend of a ``backends:`` entry (see :mod:`.registry`)."""
    return create_served(OpenAICompatBackend, name, spec, source, url)


def create_served(
    cls: Callable[..., B], name: str, spec: BackendSpec, source: str, url: str | None
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


def chat_path(chat: bool) -> str:
    return "/v1/chat/completions" if chat else "/v1/completions"


def chat_endpoint(chat: bool) -> str:
    """The endpoint's name: ``chat`` or ``completions``."""
    return "chat" if chat else "completions"


def _message(body: str) -> str:
    """A server's error message from its error body (OpenAI ``{"error": {"message"}}``,
    ``{"error": "..."}``, ``{"detail": ...}``), else the body; at most 200 characters."""
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        error = doc.get("error", doc.get("detail", doc.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error is not None:
            body = str(error)
    return body.strip()[:200]


def chat_messages(prompt: PromptInput, *, object_arguments: bool = False) -> list[dict[str, Any]]:
    """The messages of ``prompt`` in the OpenAI chat shape: every turn of a conversation
    (:func:`~.base.openai_messages`: assistant calls as ``tool_calls``, tool turns with their
    ``tool_call_id``; ``object_arguments`` for a chat template), else the system (if any)
    and user messages."""
    if prompt.messages is not None:
        return openai_messages(prompt.messages, object_arguments=object_arguments)
    messages = [{"role": "system", "content": prompt.system}] if prompt.system else []
    messages.append({"role": "user", "content": prompt.text})
    return messages


def tool_fields(prompt: PromptInput, *, choice: bool = True) -> dict[str, Any]:
    """The request fields that offer ``prompt``'s tools: ``tools`` (OpenAI function schemas)
    and, with ``choice``, its ``tool_choice``; nothing for a prompt without tools (a
    request without tools stays as it was). A template endpoint (``/tokenize``,
    ``/apply-template``) is sent no ``tool_choice``: a template does not see it."""
    fields: dict[str, Any] = {}
    if prompt.tools:
        fields["tools"] = [tool.openai() for tool in prompt.tools]
    if choice and prompt.tool_choice is not None:
        fields["tool_choice"] = prompt.tool_choice
    return fields


def parse_choice(answer: Any, *, chat: bool) -> Generation:
    """The first choice of a (chat) completion response as a :class:`Generation`."""
    choice = _first_choice(answer)
    if chat:
        message = choice.get("message") or {}
        text = message.get("content") or ""
        reasoning = message.get("reasoning_content") or message.get("reasoning")
    else:
        text, reasoning = choice.get("text") or "", None
    generation = text_generation(
        text, reasoning, choice.get("finish_reason"), choice.get("logprobs")
    )
    if chat:
        generation.tool_calls = message_calls(message.get("tool_calls"))
    read_usage(generation, answer.get("usage") if isinstance(answer, dict) else None)
    return generation


def message_calls(tool_calls: Any) -> tuple[ToolCall, ...]:
    """A chat message's ``tool_calls`` (``[{"id", "type", "function": {"name",
    "arguments"}}]``; Ollama's ``arguments`` are an object) as calls, in order: arguments
    text that is not JSON is kept as a call with ``arguments_valid=False``, a missing name
    as ``""``; ``null`` or no list: none."""
    if not isinstance(tool_calls, list):
        return ()
    calls = []
    for entry in tool_calls:
        function = entry.get("function") if isinstance(entry, dict) else None
        function = function if isinstance(function, dict) else {}
        calls.append(ToolCall.parse(str(function.get("name") or ""), function.get("arguments")))
    return tuple(calls)


def delta_calls(deltas: Sequence[Any]) -> tuple[ToolCall, ...]:
    """The calls of a stream's ``delta.tool_calls`` fragments, assembled: by ``index`` (in
    order of first appearance when a server sends none), the name as sent (first non-empty
    one), the ``arguments`` fragments concatenated, then parsed as :func:`message_calls`
    parses a whole call."""
    names: dict[Any, str] = {}
    arguments: dict[Any, list[str]] = {}
    for position, fragment in enumerate(deltas):
        if not isinstance(fragment, dict):
            continue
        index = fragment.get("index", position)
        function = fragment.get("function")
        if not isinstance(function, dict):
            function = {}
        if function.get("name") and not names.get(index):
            names[index] = str(function["name"])
        names.setdefault(index, "")
        piece = function.get("arguments")
        arguments.setdefault(index, []).append(
            piece if isinstance(piece, str) else json.dumps(piece) if piece is not None else ""
        )
    return tuple(ToolCall.parse(names[i], "".join(arguments[i])) for i in names)


def read_usage(generation: Generation, usage: Any) -> None:
    """The counts of a response's ``usage`` on ``generation``: ``completion_tokens``, and
    ``prompt_tokens_details.cached_tokens`` (prompt tokens served from the prefix cache: vLLM
    with ``--enable-prompt-tokens-details``, llama-server), where given."""
    if not isinstance(usage, dict):
        return
    if isinstance(usage.get("completion_tokens"), int):
        generation.completion_tokens = usage["completion_tokens"]
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
        generation.cached_tokens = details["cached_tokens"]


def _first_choice(answer: Any) -> dict[str, Any]:
    try:
        choice: dict[str, Any] = answer["choices"][0]
    except (KeyError, IndexError, TypeError) as exc:
        raise HttpError(f"response has no choices: {str(answer)[:200]!r}") from exc
    return choice


def assemble_chunks(chunks: list[Any], *, chat: bool) -> Generation:
    """A streamed (chat) completion's chunks as one :class:`Generation`: the texts and
    logprobs concatenated in order, the last finish reason. Logprobs of either shape: chat's
    ``content`` entries, or the legacy completions lists (``tokens``, ``token_logprobs``,
    ``top_logprobs``), joined list by list. Chunks without choices (a final usage chunk)
    are skipped."""
    text, reasoning, finish = [], [], None
    entries: list[Any] = []
    calls: list[Any] = []
    legacy: dict[str, list[Any]] = {"tokens": [], "token_logprobs": [], "top_logprobs": []}
    for chunk in chunks:
        if not isinstance(chunk, dict) or not chunk.get("choices"):
            continue
        choice = _first_choice(chunk)
        if chat:
            delta = choice.get("delta") or {}
            text.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or delta.get("reasoning") or "")
            calls.extend(delta.get("tool_calls") or [])
        else:
            text.append(choice.get("text") or "")
        logprobs = choice.get("logprobs")
        if isinstance(logprobs, dict) and isinstance(logprobs.get("content"), list):
            entries.extend(logprobs["content"])
        elif isinstance(logprobs, dict) and isinstance(logprobs.get("token_logprobs"), list):
            for key, values in legacy.items():
                values.extend(logprobs.get(key) or [])
        finish = choice.get("finish_reason") or finish
    joined: dict[str, Any] | None = None
    if entries:
        joined = {"content": entries}
    elif legacy["token_logprobs"]:
        joined = {key: values for key, values in legacy.items() if values}
    generation = text_generation("".join(text), "".join(reasoning) or None, finish, joined)
    generation.tool_calls = delta_calls(calls)
    return generation


def text_generation(text: str, reasoning: str | None, finish: Any, logprobs: Any) -> Generation:
    """A text-only :class:`Generation`: a leading ``<think>`` block moved to ``reasoning``,
    logprobs of either shape parsed, token texts in ``token_texts``."""
    match = THINK_BLOCK.match(text)
    if match:
        reasoning, text = match.group(1), text[match.end() :]
    chosen, top, tokens = parse_logprobs(logprobs)
    ids = _entry_ids(logprobs)
    if ids is not None and unsorted_positions(ids[1], keyed_by="id"):
        # A server whose top-k lists are not most likely first need not report the ids it
        # generated: mlx_lm.server 0.32.2 copies each chosen id from the first entry of its
        # unsorted list ("46" generated, ids of "5", "7", "3" reported). Its text is what is
        # compared; the unsorted lists stay a fault of the item (text-keyed).
        ids = None
    return Generation(
        text=text,
        token_ids=None if ids is None else ids[0],
        finish_reason=str(finish or "unknown"),
        chosen_logprobs=chosen,
        top_logprobs=top if ids is None else ids[1],
        top_keys="text" if ids is None else "id",
        token_texts=tokens,
        reasoning=reasoning or None,
    )


def _int_id(entry: Any) -> int | None:
    value = entry.get("id") if isinstance(entry, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _entry_ids(logprobs: Any) -> tuple[list[int], list[dict[Any, float]]] | None:
    """The token ids and the id-keyed top-k maps of a ``content`` logprobs list whose every
    entry and top-k entry carries an integer ``id`` (the server's own ids); else None."""
    entries = logprobs.get("content") if isinstance(logprobs, dict) else None
    if not isinstance(entries, list) or not entries:
        return None
    ids = [_int_id(e) for e in entries]
    tops = [e.get("top_logprobs") or [] for e in entries]
    if any(i is None for i in ids) or any(_int_id(t) is None for row in tops for t in row):
        return None
    maps: list[dict[Any, float]] = [{t["id"]: float(t["logprob"]) for t in row} for row in tops]
    return [int(i) for i in ids if i is not None], maps


def messages_payload(prompt: PromptInput, params: GenerationParams, model: str | None) -> Any:
    """An Anthropic-style ``/v1/messages`` request (greedy) for ``prompt``: its turns
    (:func:`anthropic_messages`), ``system`` apart, and its tools as Anthropic tools
    (``{"name", "description", "input_schema"}``) with the tool choice mapped (``auto`` ->
    ``{"type": "auto"}``, ``required`` -> ``any``, ``none`` -> ``none``, a named function ->
    ``{"type": "tool", "name"}``)."""
    body: dict[str, Any] = {
        "max_tokens": params.max_tokens,
        "temperature": params.temperature,
        "messages": anthropic_messages(prompt),
    }
    if model is not None:
        body["model"] = model
    if prompt.system:
        body["system"] = prompt.system
    if prompt.tools:
        body["tools"] = [
            {
                "name": tool.name,
                **({"description": tool.description} if tool.description is not None else {}),
                "input_schema": dict(tool.parameters),
            }
            for tool in prompt.tools
        ]
    choice = prompt.tool_choice
    if isinstance(choice, Mapping):
        body["tool_choice"] = {"type": "tool", "name": choice["function"]["name"]}
    elif choice is not None:
        body["tool_choice"] = {"type": {"required": "any"}.get(choice, choice)}
    return body


def anthropic_messages(prompt: PromptInput) -> list[dict[str, Any]]:
    """``prompt``'s turns but the system turn, as Anthropic messages: plain turns as they are
    (``{"role", "content"}``); an assistant turn's calls as ``tool_use`` blocks (``{"type":
    "tool_use", "id", "name", "input"}``, after a ``text`` block of its content, if any); tool
    turns as ``tool_result`` blocks (``{"type": "tool_result", "tool_use_id", "content"}``),
    the results of one turn's calls in one user message."""
    out: list[dict[str, Any]] = []
    for message in chat_messages(prompt, object_arguments=True):
        if message["role"] == "system":
            continue
        if message["role"] == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": message["tool_call_id"],
                "content": message["content"],
            }
            last = out[-1] if out else None
            if last is not None and last["role"] == "user" and isinstance(last["content"], list):
                last["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif "tool_calls" in message:
            text = [{"type": "text", "text": message["content"]}] if message["content"] else []
            uses = [
                {
                    "type": "tool_use",
                    "id": call["id"],
                    "name": call["function"]["name"],
                    "input": call["function"]["arguments"],
                }
                for call in message["tool_calls"]
            ]
            out.append({"role": "assistant", "content": [*text, *uses]})
        else:
            out.append(message)
    return out


def parse_message(answer: Any) -> Generation:
    """An Anthropic-style message: its text blocks joined; ``thinking`` blocks are the
    reasoning; ``stop_reason`` ``end_turn``/``stop_sequence`` -> ``stop``, ``max_tokens`` ->
    ``length``."""
    if not isinstance(answer, dict) or not isinstance(answer.get("content"), list):
        raise HttpError(f"response is not a message: {str(answer)[:200]!r}")
    blocks = [b for b in answer["content"] if isinstance(b, dict)]
    text = "".join(str(b.get("text") or "") for b in blocks if b.get("type") == "text")
    thinking = "".join(str(b.get("thinking") or "") for b in blocks if b.get("type") == "thinking")
    stop = answer.get("stop_reason")
    finish = {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "max_tokens": "length",
        "tool_use": "tool_calls",
    }.get(str(stop), stop)
    generation = text_generation(text, thinking or None, finish, None)
    generation.tool_calls = tuple(
        ToolCall.parse(str(b.get("name") or ""), b.get("input"))
        for b in blocks
        if b.get("type") == "tool_use"
    )
    return generation


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
