"""The backend protocol: what every engine adapter provides and declares it can do.

A backend turns a rendered prompt into a :class:`Generation` (token ids, text, per-step
log-probabilities) and, where it can, scores a given continuation teacher-forced. It declares
its :class:`Capabilities` so that a check can pick the strongest comparison both sides of a
pair support, and say which one it used.

Backends are async-first (HTTP backends drive requests concurrently); in-process backends
simply compute inside the coroutine.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..tools import Tool, ToolCall, canonical_json
from ..verdict.conduct import Abilities

if TYPE_CHECKING:
    import numpy as np

    from ..features import Feature, FeatureActivity


@dataclass(frozen=True)
class Capabilities:
    """What a backend can return; checks choose their comparison method from these."""

    full_vocab_logprobs: bool = False
    top_k_logprobs: int = 0
    token_ids: bool = False
    teacher_forcing: bool = False
    chat_template: bool = False
    teacher_forcing_top_k: int = 0
    """The ``k`` of :meth:`Backend.score_top_k` (teacher-forced top-k rows, e.g. vLLM's
    ``prompt_logprobs``); 0: the backend scores no top-k rows."""

    @classmethod
    def token_level(cls, top_k: int, chat_template: bool) -> Capabilities:
        """An engine that gives token ids and full-vocabulary teacher-forced scores."""
        return cls(True, top_k, True, True, chat_template)


@dataclass(frozen=True)
class GenerationParams:
    """Sampling and request parameters; part of the generation cache key.

    ``max_tokens``, ``temperature`` (0: greedy) and ``seed`` are sent by every backend. The
    others (:data:`~.params.REQUEST_PARAMS`) are sent only when set, each by the field its
    engine documents (:mod:`.params`: which kinds take which; a kind that does not take one
    refuses it at collection): None, ``()``, ``False`` and ``n = 1`` leave the request as a
    greedy one was before they existed. A sampled request (``temperature > 0``) also sends
    the neutral value of a truncation left unset where its engine's default truncates
    (llama-server: ``top_k`` 40, ``top_p`` 0.95, ``min_p`` 0.05), so that the parameters
    asked are the only ones applied."""

    max_tokens: int
    temperature: float = 0.0
    seed: int | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: tuple[tuple[int, float], ...] = ()
    """``(token id, bias)`` pairs added to the logits (sorted by id)."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when one is produced (excluded from the text unless
    ``include_stop``)."""
    n: int = 1
    """Choices asked in one request (:attr:`Generation.choices` holds the others)."""
    min_tokens: int | None = None
    ignore_eos: bool = False
    logprobs: int | None = None
    """Top logprobs asked per generated token (None: the backend's own default)."""
    include_stop: bool = False
    """Keep the matched stop string in the text (vLLM ``include_stop_str_in_output``)."""

    def __post_init__(self) -> None:
        bias = tuple(sorted((int(t), float(b)) for t, b in dict(self.logit_bias).items()))
        object.__setattr__(self, "logit_bias", bias)
        object.__setattr__(self, "stop", tuple(str(s) for s in self.stop))

    def written(self) -> dict[str, Any]:
        """The request parameters beyond ``max_tokens``, ``temperature`` and ``seed`` that
        differ from their defaults, by name (``{"top_p": 0.9}``)."""
        out: dict[str, Any] = {}
        for name in REQUEST_PARAM_FIELDS:
            value = getattr(self, name)
            if value != _PARAM_DEFAULTS[name]:
                out[name] = list(map(list, value)) if name == "logit_bias" else value
        return out

    def asked(self) -> list[str]:
        """The names of the parameters this request asks an engine to apply beyond
        ``max_tokens`` and ``temperature``: ``seed`` when set and :meth:`written`."""
        return (["seed"] if self.seed is not None else []) + list(self.written())

    @property
    def sampled(self) -> bool:
        """Whether the request samples (``temperature > 0``)."""
        return self.temperature > 0

    def key(self) -> tuple[Any, ...]:
        """``(max_tokens, temperature, seed)``, with the written parameters after them when
        there are any (a greedy request's key is the same as before they existed: goldens
        and caches recorded then still match)."""
        base = (self.max_tokens, self.temperature, self.seed)
        extra = self.written()
        if not extra:
            return base
        return (*base, tuple((k, repr(v)) for k, v in sorted(extra.items())))


REQUEST_PARAM_FIELDS = (
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "stop",
    "n",
    "min_tokens",
    "ignore_eos",
    "logprobs",
    "include_stop",
)
"""The fields of :class:`GenerationParams` beyond ``max_tokens``, ``temperature`` and
``seed``."""
_PARAM_DEFAULTS: dict[str, Any] = {
    name: GenerationParams.__dataclass_fields__[name].default for name in REQUEST_PARAM_FIELDS
}


@dataclass(frozen=True)
class PromptInput:
    """A prompt as sent to the engine: the rendered text and, when known, its token ids.

    Both sides of a comparison receive the same ``token_ids`` when their tokenizers agree:
    the chat template is applied once, by the baseline, and recorded here.
    """

    text: str
    token_ids: tuple[int, ...] | None
    templated: bool
    tokenizer_fingerprint: str | None = None
    system: str | None = None
    """For servers that template themselves: the system message sent beside ``text``."""
    thinking: bool = False
    messages: tuple[Message, ...] | None = None
    """For servers that template themselves, a conversation of more than a system and a user
    turn: every turn, concrete (``text`` is then the last turn's); None: a single-turn prompt
    (``text`` and ``system``)."""
    tools: tuple[Tool, ...] = ()
    """The functions offered (rendered into the prompt by a chat template; sent beside the
    messages to a server that templates itself); empty: none."""
    tool_choice: str | Mapping[str, Any] | None = field(default=None, hash=False)
    """OpenAI ``tool_choice``, sent to a server that templates itself (a template does not
    see it)."""

    def key(self) -> str:
        fields: tuple[Any, ...] = (
            self.text,
            self.token_ids,
            self.system,
            self.thinking,
            None if self.messages is None else tuple(m.key() for m in self.messages),
        )
        if self.tools or self.tool_choice is not None:
            offer = {"tools": [t.openai() for t in self.tools], "choice": self.tool_choice}
            fields = (*fields, canonical_json(offer))
        return hashlib.sha256(repr(fields).encode()).hexdigest()[:16]


@dataclass
class Generation:
    """One greedy (or sampled) generation.

    ``token_ids`` includes the end-of-sequence token when the generation stopped on it
    (``finish_reason == "stop"``), so a teacher-forced comparison also scores the decision
    to stop; ``text`` never contains it. ``chosen_logprobs[t]`` is the log-probability of
    ``token_ids[t]``; ``top_logprobs[t]`` maps the top-k tokens at step t to theirs, keyed by
    token id (``top_keys == "id"``) or, for servers that return no ids, by token text.
    """

    text: str
    token_ids: list[int] | None
    finish_reason: str
    chosen_logprobs: list[float] | None = None
    top_logprobs: list[dict[Any, float]] | None = None
    top_keys: str = "id"
    elapsed_s: float = 0.0
    token_texts: list[str] | None = None
    """Each generated token's text, from a server that returns texts, not ids (the keys of
    ``top_logprobs`` when ``top_keys == "text"``); None when it sent none."""
    reasoning: str | None = None
    """A reasoning chain returned apart from the answer (a server's ``reasoning_content``,
    Ollama's ``thinking``, a leading ``<think>`` block); never part of ``text``."""
    tool_calls: tuple[ToolCall, ...] = ()
    """The calls a chat server parsed out of the output and returned apart from ``text``
    (``message.tool_calls``, assembled from a stream's deltas; Ollama's; Anthropic
    ``tool_use`` blocks), in order; empty: none. A raw completion's (and an in-process
    engine's) calls stay in its ``text`` (``<tool_call>...</tool_call>``)."""
    batched: int = 1
    """How many prompts shared this generation's forward passes (an in-process engine's own
    batching); 1: generated alone, or by an engine that does not batch itself."""
    prompt_text: str | None = None
    """The text sent as the prompt when it was rendered for the request (a chat template
    applied for ``/v1/completions`` by :meth:`Backend.generate_via`); None otherwise."""
    prompt_tokens: int | None = None
    """The number of prompt tokens the engine generated from (in-process engines; a server's
    ``usage.prompt_tokens``, llama-server's ``tokens_evaluated``, where given)."""
    prompt_sent: int | None = None
    """The prompt tokens the backend sent for this generation (the ids of a prompt sent as
    ids), set where it checked the engine's count against them (:mod:`.prompt_count`); None:
    not measured."""
    completion_tokens: int | None = None
    """The server's count of generated tokens (``usage.completion_tokens``), where given."""
    others: tuple[Generation, ...] = field(default=(), compare=False, repr=False)
    """The other choices of a request that asked ``n > 1`` (this generation is the first),
    in the order the engine returned them."""
    cached_tokens: int | None = None
    """Prompt tokens the engine reused from its prompt cache for this request, where it says
    (``usage.prompt_tokens_details.cached_tokens``; llama-server ``timings.cache_n``; mlx-lm
    in-process, its kept prompt cache); None when it does not."""
    full_logprobs: np.ndarray | None = field(default=None, compare=False, repr=False)
    """The float32 full-vocabulary log-probabilities of each step, shape (T, V), only where
    asked for (mlx-lm's ``generate_sync(..., full_logprobs=True)``)."""
    activity: FeatureActivity | None = field(default=None, compare=False)
    """What the engine reported of the backend's features on this generation (drafted and
    accepted tokens, cache hits, KV bits: :mod:`~pytest_infercheck.features`); None for a
    backend without features or an engine that reports nothing."""


@dataclass(frozen=True)
class TopKRow:
    """One teacher-forced position scored by its top k only (:meth:`Backend.score_top_k`):
    the log-probability of the given token, and the top ``k`` tokens' (by id), which may or
    may not include the given token."""

    chosen: float
    top: dict[int, float]


@dataclass(frozen=True)
class Message:
    """A concrete turn as backends receive it: a conversation's turn with its content filled
    in (:func:`~pytest_infercheck.conversation.concrete`)."""

    role: str
    """``system``, ``user``, ``assistant`` or ``tool``."""
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    """An assistant turn's calls of the offered tools (its ``content`` may be empty)."""
    name: str | None = None
    """A ``tool`` turn: the function whose result ``content`` is."""

    def key(self) -> tuple[Any, ...]:
        """What identifies the message in a cache key (``(role, content)`` for a plain one;
        with its calls' canonical JSON and function name otherwise)."""
        if not self.tool_calls and self.name is None:
            return (self.role, self.content)
        return (self.role, self.content, tuple(c.canonical() for c in self.tool_calls), self.name)


def openai_messages(
    messages: Sequence[Message], *, object_arguments: bool = False
) -> list[dict[str, Any]]:
    """``messages`` in the OpenAI chat shape: ``{"role", "content"}`` for a plain turn; an
    assistant turn's calls as ``tool_calls`` entries (``{"id", "type": "function",
    "function": {"name", "arguments"}}``), a tool turn with ``tool_call_id`` (the id of the
    call it answers: the calls are numbered ``call_0``, ``call_1``, ... through the
    conversation, and the n-th tool turn after a turn with calls answers its n-th call) and
    ``name``. ``arguments`` are the OpenAI wire form (JSON text), or with
    ``object_arguments`` the JSON object a chat template receives (what vLLM and llama.cpp
    hand their templates, transformers' convention)."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    number = 0
    for message in messages:
        if message.role == "tool":
            call_id = pending.pop(0) if pending else None
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "name": message.name,
                    "content": message.content,
                }
            )
            continue
        if not message.tool_calls:
            out.append({"role": message.role, "content": message.content})
            pending = []
            continue
        calls = []
        pending = []
        for call in message.tool_calls:
            entry = call.openai(f"call_{number}")
            if object_arguments and call.arguments_valid:
                entry["function"]["arguments"] = call.arguments
            calls.append(entry)
            pending.append(entry["id"])
            number += 1
        out.append({"role": message.role, "content": message.content, "tool_calls": calls})
    return out


def single_turn(messages: Sequence[Message]) -> tuple[str | None, str] | None:
    """``(system, user text)`` of a ``[system?, user]`` turn list (what :meth:`Backend.render`
    takes); None for a longer conversation."""
    roles = [m.role for m in messages]
    if roles == ["user"]:
        return None, messages[0].content
    if roles == ["system", "user"]:
        return messages[0].content, messages[1].content
    return None


def chat_input(
    messages: Sequence[Message],
    thinking: bool,
    tools: Sequence[Tool] = (),
    tool_choice: str | Mapping[str, Any] | None = None,
) -> PromptInput:
    """The messages of a conversation as a server that applies its own chat template receives
    them: ``text`` the last turn's, ``system`` the system turn's, ``messages`` every turn
    (None for a ``[system?, user]`` list, which ``text`` and ``system`` say in full), and the
    tools offered."""
    one = single_turn(messages)
    if one is not None:
        text, system, turns = one[1], one[0], None
    else:
        text, turns = messages[-1].content, tuple(messages)
        system = messages[0].content if messages and messages[0].role == "system" else None
    return PromptInput(
        text,
        None,
        True,
        system=system,
        thinking=thinking,
        messages=turns,
        tools=tuple(tools),
        tool_choice=tool_choice,
    )


class BackendError(RuntimeError):
    """A backend failed to produce a result; the message names the backend and the cause."""


class Backend(abc.ABC):
    """An engine adapter. Subclasses set ``kind`` and ``capabilities``."""

    kind: str = "abstract"
    capabilities: Capabilities = Capabilities()
    concurrency: int = 1
    """Requests worth having in flight at once (in-process engines: 1)."""
    features: tuple[Feature, ...] = ()
    """The features its ``backends:`` entry turns on (set by :func:`~pytest_infercheck.
    backends.create_backend` from :func:`~pytest_infercheck.features.declared_features`)."""
    batching: str | None = None
    """The engine's own batched generation, by name, when :meth:`generate_batch` uses it;
    None: a batch is a burst of concurrent :meth:`generate` calls."""

    def __init__(self, name: str) -> None:
        self.name = name

    @abc.abstractmethod
    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        """Apply the chat template (if any) once and tokenize, returning what will be sent."""

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """Render a conversation of concrete turns (an optional system turn, user and
        assistant turns alternating, assistant calls answered by tool turns, ending with a
        user turn or tool results; see :mod:`~pytest_infercheck.suites`) as :meth:`render`
        renders one prompt: the chat template applied once over every turn and ``tools``,
        with the generation prompt after the last. ``tool_choice`` is for a server that
        templates itself (sent with the request).

        Default: a ``[system?, user]`` list without tools is :meth:`render`; anything else is
        an error naming the backend (a backend that can render it overrides this).
        """
        one = single_turn(messages)
        if one is None:
            raise self.no_conversation(messages, "it renders one prompt at a time")
        if tools:
            raise self.no_tools(tools, "it renders one prompt's text at a time")
        return await self.render(one[1], one[0], thinking)

    def no_conversation(self, messages: Sequence[Message], why: str) -> BackendError:
        """The error of a backend that cannot render the conversation ``messages``."""
        return BackendError(
            f"backend {self.name!r} ({self.kind}) cannot render a conversation of "
            f"{len(messages)} turns: {why}"
        )

    def no_tools(self, tools: Sequence[Tool], why: str) -> BackendError:
        """The error of a backend that cannot offer ``tools`` to its model."""
        names = ", ".join(t.name for t in tools)
        return BackendError(
            f"backend {self.name!r} ({self.kind}) cannot render a prompt with tools ({names}): "
            f"{why}"
        )

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        """True when this backend may be sent ``prompt.token_ids`` rendered by another backend:
        its tokenizer is verifiably the same (by default: equal vocabulary fingerprints)."""
        return (
            prompt.token_ids is not None
            and prompt.tokenizer_fingerprint is not None
            and prompt.tokenizer_fingerprint == self.tokenizer_fingerprint()
        )

    async def generate_base(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` without the model's LoRA adapter, on the same engine (the base
        model: whether the adapter engaged, :func:`~pytest_infercheck.features.
        adapter_differs`). A backend that applies adapters overrides it."""
        raise BackendError(f"backend {self.name!r} ({self.kind}) applies no LoRA adapter")

    @abc.abstractmethod
    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """Generate a continuation of ``prompt``."""

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        """Generate ``prompts`` together, results in order; a failed one is its exception.

        Default: all requests in flight at once (a burst; the HTTP client's own
        ``max_concurrency`` still bounds it). An in-process engine overrides this with real
        batched generation, so batch invariance and stress test its batching code.
        """
        import asyncio

        return await asyncio.gather(
            *(self.generate(p, params) for p in prompts), return_exceptions=True
        )

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """The same request as :meth:`generate`, streamed (SSE), assembled from its chunks."""
        raise BackendError(f"backend {self.name!r} ({self.kind}) cannot stream")

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        """Generate through a named endpoint (``completions``, ``chat``, ``messages``)."""
        raise BackendError(f"backend {self.name!r} ({self.kind}) has no endpoint {endpoint!r}")

    async def send_hostile(self, kind: str) -> str:
        """Send one hostile request (see ``config.HOSTILE_KINDS``); returns what happened,
        in a few words (the server's status or error). Only server backends."""
        raise BackendError(f"backend {self.name!r} ({self.kind}) takes no hostile requests")

    async def alive(self) -> bool:
        """Whether the engine still answers (a server: its health endpoint)."""
        return True

    async def ensure_ready(self) -> None:
        """Called once before first use: health checks, verifying the served model."""
        return None

    async def probe_abilities(self, topic: str) -> Abilities:
        """What this engine offers and lacks of one ``topic`` of optional paths and features
        (:data:`~.capabilities.PROBE_TOPICS`: ``generation-paths``, ``tokenize``,
        ``structured``), probed once, before the first check that asks sends its requests
        (``POST /v1/messages`` answering 404: the ``messages`` path is lacking). A check calls a
        path ``unsupported`` only when this probe found it lacking (:meth:`~pytest_infercheck.
        verdict.conduct.Abilities.unsupported`); any other refusal or error of a request fails
        its item. A probe that generates can warm a prefix cache, so a check probes only the
        topics it uses. Default: nothing probed (every request is made and judged)."""
        return Abilities()

    async def tokenize(self, text: str) -> list[int] | None:
        """``text``'s token ids by this engine's own tokenizer: special tokens spelled in the
        text are parsed as such, nothing (no BOS) is added. None: the engine exposes no
        tokenizer (the text is all that can be compared)."""
        return None

    async def detokenize(self, ids: Sequence[int]) -> str | None:
        """The text of ``ids`` by this engine's tokenizer; None when it exposes none."""
        return None

    async def token_pieces(self, ids: Sequence[int]) -> list[str] | None:
        """Each id's own text (a token that is part of a multi-byte character shows as its
        bytes, e.g. ``<0xE4>``), for naming tokens in reports; None when unknown."""
        return None

    def tokenizer_fingerprint(self) -> str | None:
        """A hash of the vocabulary, so that two sides can share token ids safely."""
        return None

    def logprob_unavailable_reason(self) -> str | None:
        """Why this backend's generations carry no logprobs (a server's negotiation, in a
        sentence), for a comparison that falls back to text to say; None: it gives them, or
        nothing is known."""
        return None

    def identity(self) -> dict[str, Any]:
        """Engine identity for the results: package versions, model path, build info."""
        return {"kind": self.kind, "name": self.name}

    async def aclose(self) -> None:
        """Release resources (connections, processes, model memory)."""
        return None

    async def special_tokens(self, ids: Sequence[int]) -> set[int] | None:
        """Which of ``ids`` are special (control) tokens of this engine: tokens whose
        spelling in a text becomes the token only where special tokens are parsed. None:
        unknown (the engine exposes no tokenizer)."""
        return None

    async def prompt_ids(self, prompt: PromptInput) -> list[int] | None:
        """The token ids this engine processes for ``prompt`` (rendered by its own
        :meth:`render`): the rendered ids where the render tokenized; None when they cannot
        be had (a server without a tokenize endpoint)."""
        return None if prompt.token_ids is None else list(prompt.token_ids)

    async def prompt_token_count(self, prompt: PromptInput) -> int | None:
        """The number of prompt tokens the engine reports for ``prompt`` (the usage of a
        one-token generation), where it reports one; None otherwise."""
        return None
