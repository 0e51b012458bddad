"""The harness's fake engine: an in-process :class:`~pytest_infercheck.backends.Backend`
serving the toy model (:mod:`.toy`), faithful unless its :class:`Injector` holds a fault of
the one fault space (:mod:`.faults`).

Two shapes, as the matrix's backend kind says:

- ``llama-server`` (:class:`LlamaToy`): token ids, top-k and full-vocabulary logprobs,
  teacher-forced ``score`` and ``score_top_k``, a chat template (``chat: true``) or raw text,
  streaming, the ``completions`` / ``chat`` / ``messages`` endpoints (text only), the
  structured chat capability on every path, ``tokenize``/``detokenize``, special tokens, and
  a prompt cache: ``generate`` bypasses it (reports 0 cached tokens), ``generate_cached``
  reuses the longest cached prefix and reports it, ``generate_uncached`` is the cold
  reference, ``cache_capacity`` its size (least recently used sequences evicted);
- ``openai`` (:class:`OpenAIToy`): a server that templates itself and returns text with
  top-k logprobs keyed by token text, no ids, no teacher forcing, no tokenizer, and no way
  around its prompt cache (every generation goes through it and reports its cached tokens).

Every request is logged (:attr:`Injector.log`: backend, path, key, occurrence and what its
answer held), so a faulty run can aim a fault at a request the faithful run made; what a fault
changed is said in :attr:`Injector.applied` (a fault that changed nothing is not applied).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections import Counter, OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from pytest_infercheck.backends import Backend, Capabilities, Generation, PromptInput
from pytest_infercheck.backends.base import BackendError, GenerationParams, Message, TopKRow
from pytest_infercheck.backends.http import HttpError
from pytest_infercheck.backends.prompt_count import check_prompt_count
from pytest_infercheck.structured.records import (
    PlacedCall,
    StructuredChoice,
    StructuredRequest,
    StructuredResponse,
    Usage,
)
from pytest_infercheck.tools import Tool, ToolCall

from . import toy
from .faults import STATUS, Fault, Request

STRUCTURED_PATHS = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")
CACHE_CAPACITY = 400
"""Tokens the fake prompt cache holds."""
FINGERPRINT = f"harness-toy:V{toy.V}"


class Injector:
    """The fault of a run (None: faithful), shared by its fake backends, with the log of their
    requests and what the fault changed."""

    def __init__(self, fault: Fault | None = None) -> None:
        self.fault = fault
        self.log: list[Request] = []
        self.applied: list[str] = []
        self.changed_requests: list[Request] = []
        """The requests whose answers the fault changed (or refused)."""
        self._counts: Counter[tuple[str, str, str]] = Counter()
        self._last: dict[str, tuple[str, Any]] = {}

    def begin(self, backend: str, path: str, key: str) -> tuple[Request, Fault | None]:
        """A request about to be answered, and the fault that hits it (None: none)."""
        occurrence = self._counts[(backend, path, key)]
        self._counts[(backend, path, key)] += 1
        request = Request(backend, path, key, occurrence)
        fault = self.fault if self.fault is not None and self.fault.hits(request) else None
        return request, fault

    def refuse(self, request: Request, fault: Fault | None, route: str) -> None:
        """Raise the HTTP error of an ``http-*`` fault on ``request``."""
        if fault is None or fault.kind not in STATUS:
            return
        message = f"harness fault: {fault.kind} on {request.path}"
        self.changed(f"HTTP {fault.status} on {request.path} ({request.key})", request)
        raise HttpError(
            f"backend {request.backend!r}: POST {route} -> HTTP {fault.status}: {message}",
            fault.status,
            json.dumps({"error": {"message": message}}),
        )

    def done(self, request: Request, **facts: Any) -> None:
        self.log.append(dataclasses.replace(request, **facts))

    def changed(self, what: str, request: Request) -> None:
        self.applied.append(what)
        self.changed_requests.append(request)

    def remember(self, backend: str, family: str, key: str, answer: Any) -> None:
        self._last[f"{backend}:{family}"] = (key, answer)

    def previous(self, backend: str, family: str, key: str) -> Any:
        """The last answer of ``family`` on ``backend`` to another key (None: none yet)."""
        last = self._last.get(f"{backend}:{family}")
        return None if last is None or last[0] == key else last[1]


# -- rendering ---------------------------------------------------------------------------------
def template(
    messages: Sequence[Message], tools: Sequence[Tool] = (), *, generation_prompt: bool = True
) -> str:
    """The toy chat template: ``<s>``, the tools' names, each turn as ``<|role|>content``
    (calls as ``<tool_call>`` blocks), then ``<|assistant|>``."""
    out = ["<s>"]
    if tools:
        out.append(f"<|tools|>{','.join(t.name for t in tools)}\n")
    for m in messages:
        calls = "".join(f"<tool_call>{c.canonical()}</tool_call>" for c in m.tool_calls)
        out.append(f"<|{m.role}|>{m.content}{calls}\n")
    if generation_prompt:
        out.append("<|assistant|>")
    return "".join(out)


def messages_of(prompt: PromptInput) -> list[Message]:
    """The turns of a prompt sent to a server that templates itself."""
    if prompt.messages is not None:
        return list(prompt.messages)
    system = [Message("system", prompt.system)] if prompt.system else []
    return [*system, Message("user", prompt.text)]


def _other_char(char: str) -> str:
    if char.isdigit():
        return str((int(char) + 1) % 10)
    if char.isalpha() and char.isascii():
        base = ord("a") if char.islower() else ord("A")
        return chr(base + (ord(char) - base + 1) % 26)
    return "x" if char != "x" else "y"


class ToyBackend(Backend):
    """What both shapes share (see the module docstring)."""

    kind = "toy"
    concurrency = 4

    def __init__(self, name: str, injector: Injector, *, seed: int = 0, chat: bool = True):
        super().__init__(name)
        self.injector = injector
        self.model = toy.ToyModel(seed)
        self.seed = seed
        self.chat = chat
        self._cache: OrderedDict[tuple[int, ...], int] = OrderedDict()
        self._draws = 0
        """Unseeded sampled requests so far (each one's draws its own)."""

    # -- the prompt cache ------------------------------------------------------------------
    def _cache_lookup(self, ids: Sequence[int]) -> int:
        """Prompt tokens reused from the cache for ``ids`` (at least one is evaluated)."""
        best = 0
        for stored in self._cache:
            n = 0
            for a, b in zip(stored, ids, strict=False):
                if a != b:
                    break
                n += 1
            best = max(best, n)
        return min(best, max(0, len(ids) - 1))

    def _cache_store(self, ids: Sequence[int]) -> None:
        key = tuple(ids)
        self._cache.pop(key, None)
        self._cache[key] = len(key)
        while sum(self._cache.values()) > CACHE_CAPACITY and len(self._cache) > 1:
            self._cache.popitem(last=False)

    async def cache_capacity(self) -> int | None:
        return CACHE_CAPACITY

    # -- prompts -----------------------------------------------------------------------------
    def prompt_ids_of(self, prompt: PromptInput) -> list[int]:
        """The ids the engine generates from for ``prompt``."""
        if prompt.token_ids is not None:
            return list(prompt.token_ids)
        if prompt.templated:
            return toy.tokenize(template(messages_of(prompt), prompt.tools))
        return toy.tokenize(prompt.text)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        return self._rendered(
            PromptInput(
                messages[-1].content,
                None,
                True,
                system=messages[0].content if messages[0].role == "system" else None,
                thinking=thinking,
                messages=tuple(messages),
                tools=tuple(tools),
                tool_choice=tool_choice,
            )
        )

    def _rendered(self, asked: PromptInput) -> PromptInput:
        return asked

    def tokenizer_fingerprint(self) -> str | None:
        return FINGERPRINT

    def identity(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "engine": "harness toy", "seed": self.seed}

    async def send_hostile(self, kind: str) -> str:
        return f"HTTP 400: the toy refuses a {kind} request"

    # -- generation --------------------------------------------------------------------------
    def _generation(
        self, path: str, prompt: PromptInput, params: GenerationParams, *, cache: str = "bypass"
    ) -> Generation:
        """``prompt`` generated through ``path``; ``cache``: ``bypass`` (0 cached tokens
        reported), ``use`` (the longest cached prefix reused and reported, the sequence kept),
        ``cold`` (the uncached reference), ``none`` (nothing reported)."""
        ids = self.prompt_ids_of(prompt)
        request, fault = self.injector.begin(self.name, path, prompt.key())
        self.injector.refuse(request, fault, f"/{path}")
        sent = len(prompt.token_ids) if prompt.token_ids is not None else None
        if fault is not None and fault.kind == "cut-prompt" and len(ids) >= 2:
            ids = ids[len(ids) // 2 :]  # the engine got (and counts) the second half only
            self.injector.changed(fault.describe(), request)
        if params.sampled:
            self._draws += 1
            key = ("seed", params.seed) if params.seed is not None else ("draw", self._draws)
            rng = np.random.default_rng(toy.stable_hash(self.seed, ids, key))
            out, rows, stopped = self.model.sample(ids, params.max_tokens, params, rng)
        else:
            out, rows, stopped = self.model.generate(ids, params.max_tokens)
        cached: int | None = {"bypass": 0, "cold": 0, "none": None}.get(cache)
        if cache == "use":
            cached = self._cache_lookup(ids)
            self._cache_store([*ids, *out])
        generation = self._shaped(path, out, rows, stopped, len(ids), cached)
        reference = cache == "cold" or (cache == "use" and request.occurrence == 0)
        content = len(out) - (1 if stopped else 0)
        self.injector.done(
            request,
            positions=self._positions(generation),
            content=content if generation.token_ids is not None else len(generation.text),
            logprobs=generation.chosen_logprobs is not None,
            reference=reference and self._has_reference_path(path),
            sent=sent or 0,
        )
        faithful = copied(generation)
        generation = self._faulty(request, fault, generation, ids, reference)
        self.injector.remember(self.name, "generation", request.key, faithful)
        # the backend's reading of the answer, as llama-server's and vLLM's adapters read it
        return check_prompt_count(self, generation, sent, why="the prompt went as text")

    def _has_reference_path(self, path: str) -> bool:
        return path == "generate_uncached"

    def _positions(self, g: Generation) -> int:
        if g.token_ids is not None:
            return len(g.token_ids)
        if g.token_texts is not None:
            return len(g.token_texts)
        return len(g.text)

    def _shaped(
        self,
        path: str,
        out: list[int],
        rows: list[np.ndarray],
        stopped: bool,
        n_prompt: int,
        cached: int | None,
    ) -> Generation:
        raise NotImplementedError

    def _faulty(
        self,
        request: Request,
        fault: Fault | None,
        g: Generation,
        prompt_ids: list[int],
        reference: bool,
    ) -> Generation:
        """``g`` with what ``fault`` does to it (see :mod:`.faults`)."""
        cache_fault = self.injector.fault
        corrupting = (
            cache_fault is not None
            and cache_fault.kind == "warm-reference"
            and cache_fault.variant == "corrupted-cache"
            and cache_fault.request.backend == self.name
        )
        if corrupting and (
            (g.cached_tokens or 0) > 0 or (reference and cache_fault.hits(request))  # type: ignore[union-attr]
        ):
            assert cache_fault is not None
            g.cached_tokens = max(g.cached_tokens or 0, len(prompt_ids) - 1)
            if self._change(g, cache_fault.position, prompt_ids):
                self.injector.changed(
                    f"cache hit corrupted on {request.path} ({request.key})", request
                )
            return g
        if fault is None:
            return g
        before = copied(g)
        kind, p = fault.kind, fault.position
        if kind == "warm-reference":
            g.cached_tokens = max(1, len(prompt_ids) - 1)
        elif kind == "changed-token":
            self._change(g, p, prompt_ids)
        elif kind in ("nan", "inf"):
            value = math.nan if kind == "nan" else math.inf
            if g.chosen_logprobs:
                t = min(p, len(g.chosen_logprobs) - 1)
                g.chosen_logprobs[t] = value
                if g.top_logprobs and g.top_logprobs[t]:
                    chosen = self._chosen_key(g, t)
                    if chosen in g.top_logprobs[t]:
                        g.top_logprobs[t][chosen] = value
        elif kind == "empty":
            g.text = ""
            for name in ("token_ids", "chosen_logprobs", "top_logprobs", "token_texts"):
                if getattr(g, name) is not None:
                    setattr(g, name, [])
        elif kind == "truncated":
            self._truncate(g, p)
        elif kind == "no-logprobs":
            g.chosen_logprobs = None
            g.top_logprobs = None
        elif kind == "duplicated":
            other = self.injector.previous(self.name, "generation", request.key)
            if other is not None:
                g = copied(other)
        if _differs(before, g):
            self.injector.changed(fault.describe(), request)
        return g

    def _chosen_key(self, g: Generation, t: int) -> Any:
        if g.token_ids is not None:
            return g.token_ids[t]
        return g.token_texts[t] if g.token_texts is not None else None

    def _change(self, g: Generation, p: int, prompt_ids: list[int]) -> bool:
        raise NotImplementedError

    def _truncate(self, g: Generation, p: int) -> None:
        raise NotImplementedError

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._generation("generate", prompt, params)

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._generation("generate_stream", prompt, params, cache="none")

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        out: list[Generation | BaseException] = []
        for prompt in prompts:
            try:
                out.append(self._generation("generate_batch", prompt, params))
            except BackendError as exc:
                out.append(exc)
        return out

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        if endpoint not in ("completions", "chat", "messages"):
            return await super().generate_via(endpoint, prompt, params)
        asked = dataclasses.replace(prompt, token_ids=None, templated=True)
        g = self._generation(f"via:{endpoint}", asked, params, cache="none")
        if endpoint == "completions":
            g.prompt_text = template(messages_of(asked), asked.tools)
        return g

    # -- structured chat -------------------------------------------------------------------
    def structured_paths(self) -> tuple[str, ...]:
        return STRUCTURED_PATHS

    async def structured(self, request: StructuredRequest, path: str) -> StructuredResponse:
        messages = [
            Message(t.role, t.content or "", tuple(t.tool_calls), t.name) for t in request.messages
        ]
        ids = toy.tokenize(template(messages, request.tools))
        key = toy.stable_hash(ids, request.tool_choice, request.max_tokens)
        r, fault = self.injector.begin(self.name, f"structured:{path}", f"s{key:08x}")
        if fault is not None and fault.kind in STATUS:
            try:
                self.injector.refuse(r, fault, "/v1/chat/completions")
            except HttpError as exc:
                raise _classified(exc, f"{self.name} {path}") from exc
        choice = self._choice(request, ids)
        n = 2 if path == "chat-n2" else request.n
        completion = len(toy.tokenize(choice.content or "")) + len(choice.calls) + 1
        response = StructuredResponse(
            path,  # type: ignore[arg-type]
            (choice,) * n,
            Usage(len(ids), completion * n),
        )
        self.injector.done(
            r,
            positions=max(1, len(choice.content or "")),
            content=len(choice.content or "") or len(choice.calls),
        )
        faithful = response
        response = self._faulty_structured(r, fault, response)
        self.injector.remember(self.name, "structured", r.key, faithful)
        return response

    def _choice(self, request: StructuredRequest, ids: list[int]) -> StructuredChoice:
        """The toy's answer: a call of one of the tools offered (arguments from the user's
        numbers and capitalised words), else its text answer."""
        answer = toy.detokenize(self.model.answer(ids))
        last = request.messages[-1]
        if not request.tools or request.tool_choice == "none" or last.role == "tool":
            return StructuredChoice(answer, None, (), "stop")
        h = toy.stable_hash(self.seed, ids)
        tool = request.tools[h % len(request.tools)]
        text = " ".join(t.content or "" for t in request.messages if t.role == "user")
        numbers = [int(x) for x in re.findall(r"\d+", text)]
        words = re.findall(r"\b[A-Z][a-z]+\b", text) or ["Oslo"]
        arguments: dict[str, Any] = {}
        properties = (tool.parameters or {}).get("properties") or {}
        for name, schema in properties.items():
            kind = schema.get("type") if isinstance(schema, dict) else None
            if kind == "integer":
                arguments[name] = numbers.pop(0) if numbers else h % 100
            elif kind == "string":
                arguments[name] = words[0]
        call = PlacedCall(ToolCall(tool.name, arguments), "tool_calls", "call_0")
        return StructuredChoice(None, None, (call,), "tool_calls")

    def _faulty_structured(
        self, r: Request, fault: Fault | None, response: StructuredResponse
    ) -> StructuredResponse:
        if fault is None:
            return response
        choice = response.choices[0]
        kind, p = fault.kind, fault.position
        new = choice
        if kind == "changed-token":
            if choice.calls:
                placed = choice.calls[0]
                new = dataclasses.replace(
                    choice,
                    calls=(
                        dataclasses.replace(placed, call=_changed_call(placed.call)),
                        *choice.calls[1:],
                    ),
                )
            elif choice.content:
                t = min(p, len(choice.content) - 1)
                text = choice.content
                new = dataclasses.replace(
                    choice, content=text[:t] + _other_char(text[t]) + text[t + 1 :]
                )
        elif kind == "empty":
            new = dataclasses.replace(choice, content="", calls=())
        elif kind == "truncated":
            if choice.content:
                new = dataclasses.replace(choice, content=choice.content[:p])
            else:
                new = dataclasses.replace(choice, calls=())
        elif kind == "duplicated":
            other = self.injector.previous(self.name, "structured", r.key)
            if other is not None and other.choices[0] != choice:
                new = other.choices[0]
        if new == choice:
            return response
        self.injector.changed(fault.describe(), r)
        return dataclasses.replace(response, choices=(new,) * len(response.choices))


def _changed_call(call: ToolCall) -> ToolCall:
    arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {}
    for name, value in arguments.items():
        if isinstance(value, int):
            arguments[name] = value + 1
            return ToolCall(call.name, arguments)
        if isinstance(value, str) and value:
            arguments[name] = _other_char(value[0]) + value[1:]
            return ToolCall(call.name, arguments)
    return ToolCall(call.name + "x", arguments)


def _classified(exc: HttpError, label: str) -> Exception:
    """What the real structured client makes of an HTTP error (its own function)."""
    try:
        from pytest_infercheck.structured.client import classified
    except ImportError:  # pragma: no cover (moved: the error as it is)
        return exc
    return classified(exc, label)


def copied(g: Generation) -> Generation:
    """``g`` with lists and top-logprob rows of its own: what a fault changes in place
    (:meth:`ToyBackend._faulty`, ``_change``, ``_truncate``), recursively through ``others``.
    The rest is shared: strings, numbers, and the frozen tool calls and feature activity (no
    fault changes a call's arguments). ``copy.deepcopy`` made the same copies at about ten times
    the cost: it was 40% of a harness sampling case (about 140,000 generations)."""
    return dataclasses.replace(
        g,
        token_ids=None if g.token_ids is None else list(g.token_ids),
        chosen_logprobs=None if g.chosen_logprobs is None else list(g.chosen_logprobs),
        top_logprobs=None if g.top_logprobs is None else [dict(r) for r in g.top_logprobs],
        token_texts=None if g.token_texts is None else list(g.token_texts),
        others=tuple(copied(o) for o in g.others),
        full_logprobs=None if g.full_logprobs is None else g.full_logprobs.copy(),
    )


def _differs(a: Generation, b: Generation) -> bool:
    fields = ("text", "token_ids", "chosen_logprobs", "top_logprobs", "token_texts")
    return any(_plain(getattr(a, f)) != _plain(getattr(b, f)) for f in fields) or (
        a.cached_tokens != b.cached_tokens
    )


def _plain(value: Any) -> Any:
    """``value`` with NaN made comparable (NaN != NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class LlamaToy(ToyBackend):
    """The ``llama-server`` shape (see the module docstring)."""

    kind = "llama-server"
    capabilities = Capabilities(True, toy.TOP_K, True, True, True, toy.TOP_K)

    def __init__(self, name: str, injector: Injector, *, seed: int = 0, chat: bool = True):
        super().__init__(name, injector, seed=seed, chat=chat)
        self.capabilities = Capabilities(True, toy.TOP_K, True, True, chat, toy.TOP_K)

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        if self.chat:
            asked = PromptInput(user_text, None, True, system=system, thinking=thinking)
            return self._rendered(asked)
        text = f"{system}\n\n{user_text}" if system else user_text
        return self._ids_render(
            PromptInput(text, None, False, system=system, thinking=thinking), "<s>" + text
        )

    def _rendered(self, asked: PromptInput) -> PromptInput:
        text = template(messages_of(asked), asked.tools)
        return self._ids_render(asked, text)

    def _ids_render(self, asked: PromptInput, text: str) -> PromptInput:
        ids = toy.tokenize(text)
        request, fault = self.injector.begin(self.name, "render", asked.key())
        self.injector.refuse(request, fault, "/tokenize")
        self.injector.done(request, positions=len(ids), content=len(ids))
        if fault is not None and fault.kind in ("changed-token", "empty", "truncated") and ids:
            if fault.kind == "changed-token":
                t = min(fault.position, len(ids) - 1)
                ids[t] = _other_id(ids[t])
            else:
                ids = ids[: fault.position] if fault.kind == "truncated" else []
            text = toy.detokenize(ids)
            self.injector.changed(fault.describe(), request)
        return dataclasses.replace(
            asked,
            text=text,
            token_ids=tuple(ids),
            templated=self.chat,
            tokenizer_fingerprint=FINGERPRINT,
        )

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        if not self.chat:
            return await Backend.render_messages(
                self, messages, thinking, tools=tools, tool_choice=tool_choice
            )
        return await super().render_messages(
            messages, thinking, tools=tools, tool_choice=tool_choice
        )

    async def generate_cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._generation("generate_cached", prompt, params, cache="use")

    async def generate_uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._generation("generate_uncached", prompt, params, cache="cold")

    def _shaped(
        self,
        path: str,
        out: list[int],
        rows: list[np.ndarray],
        stopped: bool,
        n_prompt: int,
        cached: int | None,
    ) -> Generation:
        content = out[:-1] if stopped else out
        finish = "stop" if stopped else "length"
        if path.startswith("via:"):
            g = Generation(toy.detokenize(content), None, finish)
            g.completion_tokens = len(out)
            return g
        return Generation(
            text=toy.detokenize(content),
            token_ids=list(out),
            finish_reason=finish,
            chosen_logprobs=[float(row[t]) for row, t in zip(rows, out, strict=True)],
            top_logprobs=[toy.top_k(row) for row in rows],
            prompt_tokens=n_prompt,
            completion_tokens=len(out),
            cached_tokens=cached,
        )

    def _change(self, g: Generation, p: int, prompt_ids: list[int]) -> bool:
        if g.token_ids is None:
            if not g.text:
                return False
            t = min(p, len(g.text) - 1)
            g.text = g.text[:t] + _other_char(g.text[t]) + g.text[t + 1 :]
            return True
        content = len(g.token_ids) - (1 if g.token_ids and g.token_ids[-1] == toy.EOS else 0)
        if content <= 0:
            return False
        t = min(p, content - 1)
        old = g.token_ids[t]
        top = g.top_logprobs[t] if g.top_logprobs else {}
        alternatives = [k for k in top if k != old and k >= len(toy.SPECIALS)]
        new = alternatives[0] if alternatives else _other_id(old)
        row = self.model.row(prompt_ids, g.token_ids[:t])
        g.token_ids[t] = new
        if g.chosen_logprobs is not None:
            g.chosen_logprobs[t] = float(row[new])
        end = len(g.token_ids) - (1 if g.token_ids[-1] == toy.EOS else 0)
        g.text = toy.detokenize(g.token_ids[:end])
        return True

    def _truncate(self, g: Generation, p: int) -> None:
        if g.token_ids is None:
            g.text = g.text[:p]
            return
        for name in ("token_ids", "chosen_logprobs", "top_logprobs"):
            value = getattr(g, name)
            if value is not None:
                setattr(g, name, value[:p])
        g.text = toy.detokenize([i for i in g.token_ids if i != toy.EOS])

    # -- teacher forcing -----------------------------------------------------------------------
    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        rows = self._rows("score", prompt_ids, continuation_ids)
        return rows

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        rows = self._rows("score_top_k", prompt_ids, continuation_ids)
        out = []
        for t, row in enumerate(rows):
            given = continuation_ids[t] if t < len(continuation_ids) else toy.EOS
            out.append(TopKRow(float(row[given]), toy.top_k(row)))
        return out

    def _rows(self, path: str, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        key = f"r{toy.stable_hash(prompt_ids, continuation_ids):08x}"
        request, fault = self.injector.begin(self.name, path, key)
        self.injector.refuse(request, fault, "/completion")
        rows = self.model.score(prompt_ids, continuation_ids).copy()
        n = rows.shape[0]
        self.injector.done(request, positions=n, content=n, logprobs=True)
        if fault is None or n == 0:
            return rows
        p = min(fault.position, n - 1)
        if fault.kind in ("nan", "inf"):
            rows[p, :] = math.nan if fault.kind == "nan" else math.inf
        elif fault.kind == "changed-token":
            order = np.argsort(-rows[p])
            a, b = order[0], order[1]
            rows[p, a], rows[p, b] = rows[p, b], rows[p, a]
        elif fault.kind == "empty":
            rows = rows[:0]
        elif fault.kind == "truncated":
            rows = rows[: fault.position]
        else:
            return rows
        self.injector.changed(fault.describe(), request)
        return rows

    # -- the tokenizer -----------------------------------------------------------------------
    async def tokenize(self, text: str) -> list[int]:
        ids = toy.tokenize(text)
        request, fault = self.injector.begin(self.name, "tokenize", f"t{toy.stable_hash(text):08x}")
        self.injector.refuse(request, fault, "/tokenize")
        self.injector.done(request, positions=len(ids), content=len(ids))
        if fault is None or not ids:
            return ids
        if fault.kind == "changed-token":
            t = min(fault.position, len(ids) - 1)
            ids[t] = _other_id(ids[t])
        elif fault.kind == "empty":
            ids = []
        elif fault.kind == "truncated":
            ids = ids[: fault.position]
        else:
            return ids
        self.injector.changed(fault.describe(), request)
        return ids

    async def detokenize(self, ids: Sequence[int]) -> str:
        text = toy.detokenize(ids)
        key = f"d{toy.stable_hash(list(ids)):08x}"
        request, fault = self.injector.begin(self.name, "detokenize", key)
        self.injector.refuse(request, fault, "/detokenize")
        self.injector.done(request, positions=len(text), content=len(text))
        if fault is None or not text:
            return text
        t = min(fault.position, len(text) - 1)
        if fault.kind == "changed-token":
            text = text[:t] + _other_char(text[t]) + text[t + 1 :]
        elif fault.kind == "empty":
            text = ""
        elif fault.kind == "truncated":
            text = text[: fault.position]
        else:
            return text
        self.injector.changed(fault.describe(), request)
        return text

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        return [toy.VOCAB[i] for i in ids]

    async def special_tokens(self, ids: Sequence[int]) -> set[int]:
        return {i for i in ids if i < len(toy.SPECIALS)}

    async def prompt_ids(self, prompt: PromptInput) -> list[int] | None:
        return self.prompt_ids_of(prompt)

    async def prompt_token_count(self, prompt: PromptInput) -> int | None:
        return len(self.prompt_ids_of(prompt))


class OpenAIToy(ToyBackend):
    """The ``openai`` shape (see the module docstring): text and top-k logprobs by token
    text, a server-side template, every generation through the prompt cache."""

    kind = "openai"
    capabilities = Capabilities(False, toy.TOP_K, False, False, True)

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return PromptInput(user_text, None, True, system=system, thinking=thinking)

    def _has_reference_path(self, path: str) -> bool:
        return path == "generate"

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self._generation("generate", prompt, params, cache="use")

    async def prompt_token_count(self, prompt: PromptInput) -> int | None:
        return len(self.prompt_ids_of(prompt))

    def _shaped(
        self,
        path: str,
        out: list[int],
        rows: list[np.ndarray],
        stopped: bool,
        n_prompt: int,
        cached: int | None,
    ) -> Generation:
        content = out[:-1] if stopped else out
        finish = "stop" if stopped else "length"
        text = toy.detokenize(content)
        if path.startswith("via:"):
            return Generation(text, None, finish)
        texts = [toy.VOCAB[t] for t in content]
        tops = [
            {toy.VOCAB[i]: lp for i, lp in toy.top_k(row).items()} for row in rows[: len(content)]
        ]
        return Generation(
            text=text,
            token_ids=None,
            finish_reason=finish,
            chosen_logprobs=[float(row[t]) for row, t in zip(rows, content, strict=False)],
            top_logprobs=tops,
            top_keys="text",
            token_texts=texts,
            prompt_tokens=n_prompt,
            completion_tokens=len(content),
            cached_tokens=cached,
        )

    def _change(self, g: Generation, p: int, prompt_ids: list[int]) -> bool:
        if g.token_texts is None:
            if not g.text:
                return False
            t = min(p, len(g.text) - 1)
            g.text = g.text[:t] + _other_char(g.text[t]) + g.text[t + 1 :]
            return True
        if not g.token_texts:
            return False
        t = min(p, len(g.token_texts) - 1)
        old = g.token_texts[t]
        top = g.top_logprobs[t] if g.top_logprobs else {}
        alternatives = [k for k in top if k != old and k not in toy.SPECIALS]
        new = alternatives[0] if alternatives else _other_char(old)
        g.token_texts[t] = new
        if g.chosen_logprobs is not None and new in top:
            g.chosen_logprobs[t] = top[new]
        g.text = "".join(g.token_texts)
        return True

    def _truncate(self, g: Generation, p: int) -> None:
        if g.token_texts is None:
            g.text = g.text[:p]
            return
        for name in ("token_texts", "chosen_logprobs", "top_logprobs"):
            value = getattr(g, name)
            if value is not None:
                setattr(g, name, value[:p])
        g.text = "".join(g.token_texts or [])


def _other_id(token: int) -> int:
    """Another ordinary (non-special) id."""
    first = len(toy.SPECIALS)
    return first + (token - first + 1) % (toy.V - first)


SHAPES: dict[str, type[ToyBackend]] = {"llama-server": LlamaToy, "openai": OpenAIToy}
"""The fake engine's class by the backend kind the matrix names."""
