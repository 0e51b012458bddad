"""Fault injection on any backend, for the plugin's own mutation test (the fault matrix).

:class:`FaultyBackend` wraps a real backend (in-process mlx-lm, llama-server, ...) and
applies one :class:`Fault` to what it returns; :func:`pytest_infercheck_wrap_backend` is the
plugin hook that puts it in place, by backend name, in a pytest run whose conftest imports
it::

    # conftest.py of the run
    from tests.faults import pytest_infercheck_wrap_backend  # noqa: F401

    # infercheck.yaml
    backends:
      local:      {kind: mlx-lm}      # the faithful target
      faulty-nan: {kind: mlx-lm}      # the same engine (one model loaded), NaN logprobs

A backend named ``<mode>-<fault>`` (:func:`backend_name`) is wrapped; any other name is left
alone. Two modes (:class:`Mode`):

- ``faulty-``: every generation and every teacher-forced score is faulty. For the kinds that
  compare a target with another (compare, sweep, diff, golden replay), whose faithful side
  is another backend.
- ``flaky-``: the first generation of each prompt (by rendered prompt and parameters) is
  intact, every later one faulty; scores always faulty. For the kinds that compare a target
  with itself (determinism, stress, batch-invariance, stream/endpoint parity,
  cache-pollution): a fault that hits every generation alike is invisible to a comparison
  of the target with itself, an engine that goes wrong after its first answer is not.

The faults, each deterministic (the position is a seeded choice among the middle
positions of the generation, the same for a prompt in every run):

- ``NAN_LOGPROBS`` / ``INF_LOGPROBS``: the chosen logprob (and the chosen token's top-k
  entry) at one position is NaN / +inf; in a teacher-forced score, one row is all NaN /
  +inf.
- ``EMPTY``: no tokens, empty text (logprobs and token texts empty too); finish reason kept.
- ``TRUNCATED``: the first half of the tokens (and their logprobs), the text re-decoded from
  them when the backend can decode (mlx-lm: its tokenizer; llama-server: ``/detokenize``),
  else the first half of the text; finish reason kept (an engine that drops the tail).
- ``SWAPPED_TOKEN``: the token at one middle position replaced, by its best alternative in
  the top-k when there is one (its logprob too), else by the next id; the text re-decoded
  around it when the backend can decode, else one character of the text changed.
- ``MISMATCHED_LOGPROBS``: every chosen logprob lowered by 1 nat while the tokens and the
  top-k maps stay: the logprobs no longer belong to the chosen tokens.
- ``EMPTY_BODY`` (HTTP only): the server answers a generation request with HTTP 200 and an
  empty body. Not done here: :class:`tests.faulty_proxy.FaultyProxy` with
  ``Fault(empty_body=True)`` in front of a real server; the hook leaves such a backend
  alone.

:data:`EXPECTED` is the kind x fault table: the words a check's failure must contain for
each fault it can see, or :data:`PASS` (with the reason) for a fault it cannot;
:data:`WITHOUT_TOP_K` the pairs an engine without top-k logprobs leaves invisible.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from pytest_infercheck.backends import Backend, Generation, GenerationParams, PromptInput
from pytest_infercheck.backends.base import Message
from pytest_infercheck.config import BackendSpec


class Fault(enum.Enum):
    NAN_LOGPROBS = "nan"
    INF_LOGPROBS = "inf"
    EMPTY = "empty"
    TRUNCATED = "truncated"
    SWAPPED_TOKEN = "swapped"
    MISMATCHED_LOGPROBS = "mismatched"
    EMPTY_BODY = "empty-body"


IN_PROCESS_FAULTS = tuple(f for f in Fault if f is not Fault.EMPTY_BODY)
"""What :class:`FaultyBackend` injects (all but the HTTP fault)."""


class Mode(enum.Enum):
    ALWAYS = "faulty"
    AFTER_FIRST = "flaky"


def backend_name(fault: Fault, mode: Mode = Mode.ALWAYS) -> str:
    """The ``backends:`` name that makes the hook wrap a backend with ``fault``."""
    return f"{mode.value}-{fault.value}"


def parse_backend_name(name: str) -> tuple[Fault, Mode] | None:
    for mode in Mode:
        prefix = f"{mode.value}-"
        if name.startswith(prefix):
            try:
                return Fault(name[len(prefix) :]), mode
            except ValueError:
                return None
    return None


def pytest_infercheck_wrap_backend(
    backend: Backend, name: str, spec: BackendSpec
) -> Backend | None:
    """The plugin hook: wrap backends named ``faulty-<fault>`` / ``flaky-<fault>``."""
    parsed = parse_backend_name(name)
    if parsed is None or parsed[0] is Fault.EMPTY_BODY:  # EMPTY_BODY: the proxy's job
        return None
    fault, mode = parsed
    return FaultyBackend(backend, fault, mode, name=name)


# --------------------------------------------------------------------------------------
# The expected table

PASS = "pass"
"""A fault the kind cannot see: its run must pass (each use says why)."""

NON_FINITE_NAN = ("non-finite", "nan")
NON_FINITE_INF = ("non-finite", "+inf")
EMPTY_GENERATION = ("empty generation",)
DIFFER = ("differ|diverg|changed",)  # "ids differ from token 1", "first divergence", "changed"
LOGPROB = ("logprob",)
EMPTY_BODY = ("empty", "body")

_COMPARED = {
    Fault.NAN_LOGPROBS: NON_FINITE_NAN,
    Fault.INF_LOGPROBS: NON_FINITE_INF,
    Fault.EMPTY: EMPTY_GENERATION,
    Fault.TRUNCATED: DIFFER,
    Fault.SWAPPED_TOKEN: DIFFER,
    Fault.MISMATCHED_LOGPROBS: LOGPROB,
    Fault.EMPTY_BODY: EMPTY_BODY,
}
"""A kind that compares tokens, text and logprobs against a reference sees every fault."""

EXPECTED: dict[str, dict[Fault, tuple[str, ...] | str]] = {
    # The comparison kinds: a faithful baseline (another backend, or a golden recorded from
    # one) against the faulty test side (``faulty-``: every generation and score). "golden"
    # is golden replay: a compare whose baseline is a golden file recorded from the faithful
    # backend (README "Golden baselines").
    "compare": dict(_COMPARED),
    "sweep": dict(_COMPARED),
    "diff": dict(_COMPARED),
    "golden": dict(_COMPARED),
    # The kinds that compare a target with itself (``flaky-``: the first generation of each
    # prompt is intact, the later ones faulty).
    "determinism": dict(_COMPARED),  # runs 1.. against run 0, logprob drift included
    "batch-invariance": dict(_COMPARED),  # the prompt alone, then in batches; logprobs too
    "stream-parity": dict(_COMPARED),  # not streamed, then streamed; logprobs too
    # Stress and cache-pollution compare outputs by tokens and text, but every output's own
    # logprobs are checked: NaN / +inf, and a chosen logprob that disagrees with its own top-k
    # entry (see WITHOUT_TOP_K for engines that return no top-k).
    "stress": dict(_COMPARED),
    "cache-pollution": dict(_COMPARED),
    "endpoint-parity": {
        **_COMPARED,
        # The OpenAI / Anthropic endpoints are asked for no logprobs (and return no token
        # ids): there is no logprob to make NaN, +inf or mismatched.
        Fault.NAN_LOGPROBS: PASS,
        Fault.INF_LOGPROBS: PASS,
        Fault.MISMATCHED_LOGPROBS: PASS,
    },
}


WITHOUT_TOP_K: dict[tuple[str, Fault], str] = {
    **{
        (kind, Fault.MISMATCHED_LOGPROBS): (
            "the engine returns no top-k, so a chosen logprob cannot disagree with its own "
            "top-k entry; its teacher-forced scores come from another forward pass (a full "
            "one, not the incremental one of generation), whose float differences in bf16 "
            "are not told from a shifted logprob by a fixed tolerance"
        )
        for kind in ("compare", "sweep", "diff", "golden")
    },
    ("stress", Fault.MISMATCHED_LOGPROBS): (
        "the engine returns no top-k, so a chosen logprob cannot disagree with its own "
        "top-k entry; and logprobs legitimately move under load (batched numerics), so a "
        "lowered logprob with the same tokens is no fault stress can tell from a faithful "
        "engine under load"
    ),
}
"""Pairs that are :data:`PASS` on an engine whose generations carry only the chosen
logprob, no top-k (in-process mlx-lm): the reason, by (kind, fault)."""


def expected(kind: str, fault: Fault, top_k: bool) -> tuple[str, ...] | str:
    """:data:`EXPECTED` for an engine that returns top-k logprobs (``top_k``) or not."""
    if not top_k and (kind, fault) in WITHOUT_TOP_K:
        return PASS
    return EXPECTED[kind][fault]


def message_names(message: str, expected: tuple[str, ...]) -> bool:
    """Whether ``message`` contains every word of ``expected`` (case-insensitive); a word
    ``a|b`` is either."""
    lowered = message.lower()
    return all(
        any(alternative in lowered for alternative in word.lower().split("|")) for word in expected
    )


# --------------------------------------------------------------------------------------
# The wrapper


def _middle_position(n: int, seed: str) -> int:
    """A seeded choice among the middle third of ``n`` positions (``n`` >= 1)."""
    low, high = n // 3, n - 1 - n // 3
    return random.Random(seed).randint(low, max(low, high))


class FaultyBackend(Backend):
    """``inner`` with ``fault`` applied to its generations and scores (see the module
    docstring); everything else is delegated."""

    def __init__(
        self,
        inner: Backend,
        fault: Fault,
        mode: Mode = Mode.ALWAYS,
        *,
        name: str | None = None,
        seed: int = 0,
    ) -> None:
        if fault is Fault.EMPTY_BODY:
            raise ValueError("EMPTY_BODY is an HTTP fault: use tests.faulty_proxy")
        super().__init__(name or inner.name)
        self.inner = inner
        self.fault = fault
        self.mode = mode
        self.seed = seed
        self.kind = inner.kind
        self.capabilities = inner.capabilities
        self.concurrency = inner.concurrency
        self.batching = inner.batching
        self.applied = 0
        """How many generations and scores were made faulty."""
        self._seen: dict[tuple[str, tuple[Any, ...]], int] = {}

    # -- delegated ------------------------------------------------------------------------
    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return await self.inner.render(user_text, system, thinking)

    async def render_messages(
        self, messages: Sequence[Message], thinking: bool, **offer: Any
    ) -> PromptInput:
        return await self.inner.render_messages(messages, thinking, **offer)

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        return await self.inner.accepts_token_ids(prompt)

    async def send_hostile(self, kind: str) -> str:
        return await self.inner.send_hostile(kind)

    async def alive(self) -> bool:
        return await self.inner.alive()

    async def ensure_ready(self) -> None:
        await self.inner.ensure_ready()

    def tokenizer_fingerprint(self) -> str | None:
        return self.inner.tokenizer_fingerprint()

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "name": self.name, "fault": self.fault.value}

    async def aclose(self) -> None:
        return None  # the plugin closes the wrapped backend itself

    # -- faulty ---------------------------------------------------------------------------
    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        faulty = self._is_faulty(prompt, params)
        generation = await self.inner.generate(prompt, params)
        return await self._apply(generation, prompt) if faulty else generation

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        faulty = self._is_faulty(prompt, params)
        generation = await self.inner.generate_stream(prompt, params)
        return await self._apply(generation, prompt) if faulty else generation

    async def generate_via(
        self, endpoint: str, prompt: PromptInput, params: GenerationParams
    ) -> Generation:
        faulty = self._is_faulty(prompt, params)
        generation = await self.inner.generate_via(endpoint, prompt, params)
        return await self._apply(generation, prompt) if faulty else generation

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        faulty = [self._is_faulty(p, params) for p in prompts]
        results = await self.inner.generate_batch(prompts, params)
        out: list[Generation | BaseException] = []
        for prompt, hit, result in zip(prompts, faulty, results, strict=True):
            if hit and isinstance(result, Generation):
                out.append(await self._apply(result, prompt))
            else:
                out.append(result)
        return out

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        rows = await self.inner.score(prompt_ids, continuation_ids)
        value = {Fault.NAN_LOGPROBS: math.nan, Fault.INF_LOGPROBS: math.inf}.get(self.fault)
        if value is None or rows.shape[0] == 0:
            return rows
        rows = rows.copy()
        seed = f"{self.seed}:{prompt_ids}:{continuation_ids}"
        rows[_middle_position(rows.shape[0], seed), :] = value
        self.applied += 1
        return rows

    # -- what a fault does -------------------------------------------------------------------
    def _is_faulty(self, prompt: PromptInput, params: GenerationParams) -> bool:
        """Counted when the request is made (so a burst's first request is the intact one)."""
        if self.mode is Mode.ALWAYS:
            return True
        key = (prompt.key(), params.key())
        seen = self._seen.get(key, 0)
        self._seen[key] = seen + 1
        return seen > 0

    async def _decode(self, ids: list[int]) -> str | None:
        """The text of ``ids`` by the wrapped engine's tokenizer, None if it has none here."""
        loaded = getattr(self.inner, "_loaded", None)  # mlx-lm: the loaded tokenizer
        if loaded is not None and hasattr(loaded, "tokenizer"):
            return str(loaded.tokenizer.decode(ids))
        http = getattr(self.inner, "http", None)
        if self.inner.kind == "llama-server" and http is not None:
            answer = await http.request("POST", "/detokenize", {"tokens": ids})
            return str(answer.get("content", ""))
        return None

    async def _apply(self, generation: Generation, prompt: PromptInput) -> Generation:
        g = dataclasses.replace(
            generation,
            token_ids=None if generation.token_ids is None else list(generation.token_ids),
            chosen_logprobs=(
                None if generation.chosen_logprobs is None else list(generation.chosen_logprobs)
            ),
            top_logprobs=(
                None
                if generation.top_logprobs is None
                else [dict(row) for row in generation.top_logprobs]
            ),
            token_texts=None if generation.token_texts is None else list(generation.token_texts),
        )
        seed = f"{self.seed}:{prompt.key()}"
        apply = {
            Fault.NAN_LOGPROBS: self._non_finite,
            Fault.INF_LOGPROBS: self._non_finite,
            Fault.EMPTY: self._empty,
            Fault.TRUNCATED: self._truncated,
            Fault.SWAPPED_TOKEN: self._swapped,
            Fault.MISMATCHED_LOGPROBS: self._mismatched,
        }[self.fault]
        await apply(g, seed)
        self.applied += 1
        return g

    @staticmethod
    def _content_length(g: Generation) -> int:
        """Generated tokens without a final EOS (mlx-lm keeps it in ``token_ids``)."""
        n = len(g.token_ids or g.chosen_logprobs or [])
        return n - 1 if g.finish_reason == "stop" and n > 1 else n

    async def _non_finite(self, g: Generation, seed: str) -> None:
        value = math.nan if self.fault is Fault.NAN_LOGPROBS else math.inf
        if not g.chosen_logprobs:
            return
        t = _middle_position(max(1, self._content_length(g)), seed)
        g.chosen_logprobs[t] = value
        top = g.top_logprobs[t] if g.top_logprobs and t < len(g.top_logprobs) else {}
        if g.token_ids and g.token_ids[t] in top:
            top[g.token_ids[t]] = value

    async def _empty(self, g: Generation, seed: str) -> None:
        g.text = ""
        for name in ("token_ids", "chosen_logprobs", "top_logprobs"):
            if getattr(g, name) is not None:
                setattr(g, name, [])
        if g.token_texts is not None:
            g.token_texts = []

    async def _truncated(self, g: Generation, seed: str) -> None:
        if g.token_ids:
            keep = len(g.token_ids) // 2
            text_ids = g.token_ids[:keep]
            decoded = await self._decode(text_ids)
            g.text = decoded if decoded is not None else g.text[: len(g.text) // 2]
            g.token_ids = g.token_ids[:keep]
            if g.chosen_logprobs is not None:
                g.chosen_logprobs = g.chosen_logprobs[:keep]
            if g.top_logprobs is not None:
                g.top_logprobs = g.top_logprobs[:keep]
            if g.token_texts is not None:
                g.token_texts = g.token_texts[:keep]
        else:
            g.text = g.text[: len(g.text) // 2]

    async def _swapped(self, g: Generation, seed: str) -> None:
        if not g.token_ids:
            if g.text:
                i = _middle_position(len(g.text), seed)
                g.text = g.text[:i] + _other_char(g.text[i]) + g.text[i + 1 :]
            return
        t = _middle_position(max(1, self._content_length(g)), seed)
        old = g.token_ids[t]
        top = g.top_logprobs[t] if g.top_logprobs and t < len(g.top_logprobs) else {}
        alternatives = {k: v for k, v in top.items() if k != old and isinstance(k, int)}
        new = max(alternatives, key=lambda k: alternatives[k]) if alternatives else old + 1
        if alternatives and g.chosen_logprobs is not None and t < len(g.chosen_logprobs):
            g.chosen_logprobs[t] = alternatives[new]
        head = await self._decode(g.token_ids[:t])
        upto = await self._decode(g.token_ids[: t + 1])
        piece = await self._decode([new])
        g.token_ids[t] = new
        if head is not None and upto is not None and piece is not None and g.text.startswith(upto):
            g.text = head + piece + g.text[len(upto) :]
        elif g.text:
            i = min(len(g.text) - 1, len(head or ""))
            g.text = g.text[:i] + _other_char(g.text[i]) + g.text[i + 1 :]
        tokens = g.token_texts
        if tokens is not None and t < len(tokens):
            tokens[t] = piece if piece is not None else _other_char(str(tokens[t])[:1] or "x")

    async def _mismatched(self, g: Generation, seed: str) -> None:
        if g.chosen_logprobs:
            g.chosen_logprobs = [lp - 1.0 for lp in g.chosen_logprobs]


def _other_char(char: str) -> str:
    if char.isdigit() and char.isascii():
        return str((int(char) + 1) % 10)
    if char.isascii() and char.isalpha():
        base = ord("a") if char.islower() else ord("A")
        return chr(base + (ord(char) - base + 1) % 26)
    return "y" if char == "x" else "x"
