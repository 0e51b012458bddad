"""SGLang through its native API, so that it gets token-level and teacher-forced comparisons.

Built on SGLang's documented shapes and tested against a fake of them (``tests/http/
fake_sglang.py``), not a live server: SGLang's wheels and kernels are CUDA builds. Sources,
in ``github.com/sgl-project/sglang``: ``python/sglang/srt/entrypoints/http_server.py`` at
``0025436eab0556737d615b36a4dd3e1e26e82f3d`` (routes), ``docs/basic_usage/native_api.ipynb``
at ``06c48ca8da0b2c8aac15df74a768e6a012444064`` and ``docs/basic_usage/sampling_params.md`` at
``0a0dd3590799de5344ff8db9b1886105d4c18af9`` (``/generate`` arguments),
``python/sglang/srt/sampling/sampling_params.py`` at ``00c17cafcb9e289d5ca97c50e44ada54e4fd5b03``
(``sampling_seed``, ``max_new_tokens >= 0``), ``python/sglang/srt/entrypoints/openai/
serving_tokenize.py`` at ``0351c1fafe4c53c91c331dea205af48b018af559`` (``/tokenize``,
``/detokenize``) and ``test/srt/test_srt_endpoint.py`` (``prompt_tokens == logprob_start_len +
len(input_token_logprobs)``; older servers returned one entry fewer).

- ``/generate`` with ``input_ids`` (the prompt's ids; ``text`` when it has none),
  ``sampling_params`` ``{max_new_tokens, temperature, sampling_seed}``, ``return_logprob``,
  ``top_logprobs_num`` and ``logprob_start_len: -1`` (output positions only). The answer's
  ``output_ids`` are the generated ids (with the EOS that stopped it); ``meta_info`` holds
  ``output_token_logprobs`` / ``output_top_logprobs`` as ``(logprob, token_id, text)`` tuples,
  ``finish_reason`` (``{"type": "stop"|"length"|"abort", ...}``), ``prompt_tokens``,
  ``completion_tokens`` and ``cached_tokens`` (prompt tokens served from the radix cache,
  summed in ``observed``).
- Teacher forcing in one request: the prompt and continuation ids as ``input_ids``,
  ``max_new_tokens: 1``, ``logprob_start_len: len(prompt) - 1`` and ``top_logprobs_num: k``.
  ``input_token_logprobs[j]`` is the logprob of the input token at position
  ``logprob_start_len + j`` given the tokens before it (None at position 0), and
  ``input_top_logprobs[j]`` the top k of that same distribution; the last ``len(continuation)``
  entries are the continuation's, checked id by id (so a server of either convention reads
  the same, and one that misaligns them is an error, never a shifted score). With ``k`` = the
  vocabulary (its ``config.json``, up to :data:`FULL_VOCAB_SCORING_LIMIT`) the rows are the full
  distributions: :meth:`SglangBackend.score`; otherwise :meth:`SglangBackend.score_top_k`.
- ``/flush_cache`` empties the radix cache; it is called once at readiness, so a session
  starts cold. SGLang refuses (400) while other requests run: recorded in ``observed``
  (``cache_flushed``), not fatal, as a server shared with other clients would be.
- ``/tokenize`` (``prompt``, ``add_special_tokens``) and ``/detokenize`` (``tokens``,
  ``skip_special_tokens``) are the server's own tokenizer; ``/health`` answers 200 with an
  empty body; ``/get_model_info`` (``model_path``, ``tokenizer_path``) and
  ``/get_server_info`` (``version``) are recorded. The OpenAI-compatible ``/v1/...`` routes
  serve :meth:`generate_via` (``completions``, ``chat``), as for ``kind: openai``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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
from .http import HttpError, HttpSettings
from .llama_server import FULL_VOCAB_SCORING_LIMIT
from .openai_compat import OpenAICompatBackend
from .params import TAKEN, openai_fields
from .prompt_count import check_prompt_count, sent_ids

if TYPE_CHECKING:
    from .spec import SglangSpec

TOP_K = 8


class SglangBackend(OpenAICompatBackend):
    """An SGLang server, reached through its native ``/generate``."""

    kind = "sglang"

    def __init__(
        self,
        name: str,
        settings: HttpSettings,
        *,
        model: str | None,
        chat: bool = False,
        top_k: int = TOP_K,
    ) -> None:
        super().__init__(name, settings, model=model, chat=chat, top_k=top_k)
        self.model_info: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.n_vocab: int | None = None
        """The vocabulary size from the served model folder's ``config.json``; None when the
        model is not a local folder (then no full rows: only :meth:`score_top_k`)."""
        self._bos: tuple[int, str] | None = None
        """The token ``add_special_tokens`` puts in front (id, text), learnt at readiness."""
        self._pieces: dict[int, str] = {}
        self.observed["cached_tokens"] = 0

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        scores = self.n_vocab is not None and self.n_vocab <= FULL_VOCAB_SCORING_LIMIT
        return Capabilities(
            scores, self.top_k, True, scores, self.chat, teacher_forcing_top_k=self.top_k
        )

    async def ensure_ready(self) -> None:
        if not await self.alive():
            raise BackendError(f"backend {self.name!r} (sglang): /health did not answer 200")
        self.model_info = await self._get_json("/get_model_info")
        self.server_info = await self._get_json("/get_server_info")
        self.n_vocab = self.config_vocab_size()
        try:
            await self.flush_cache()
            self.observed["cache_flushed"] = True
        except HttpError as exc:
            if exc.status != 400:
                raise
            self.observed["cache_flushed"] = f"refused: {exc.body.strip()[:120]}"
        special, plain = await self._tokenize("0", True), await self._tokenize("0", False)
        if len(special) == len(plain) + 1 and special[1:] == plain:
            self._bos = (special[0], await self.detokenize(special[:1]))

    async def _get_json(self, path: str) -> dict[str, Any]:
        answer = await self.http.request("GET", path)
        if not isinstance(answer, dict):
            raise BackendError(f"backend {self.name!r} (sglang): {path} answered {answer!r:.200}")
        return answer

    async def flush_cache(self) -> None:
        """Empty the server's radix (prefix) cache; SGLang refuses (HTTP 400) while requests
        are running or waiting, which is an error here."""
        status, body = await self.http.send_once("POST", "/flush_cache")
        if status != 200:
            raise HttpError(
                f"backend {self.name!r} (sglang): POST /flush_cache -> HTTP {status}: {body[:300]}",
                status,
                body,
            )

    async def alive(self) -> bool:
        """``GET /health`` answers 200 (with an empty body) while the engine generates."""
        try:
            status, _ = await self.http.send_once("GET", "/health", timeout_s=30.0)
        except HttpError:
            return False
        return status == 200

    def model_folder(self) -> Path | None:
        """The served model's local folder: the model this backend was given, else the
        ``model_path`` the server reports."""
        for candidate in (self.model, self.model_info.get("model_path")):
            if isinstance(candidate, str) and candidate:
                folder = Path(candidate).expanduser()
                if folder.is_dir():
                    return folder
        return None

    async def _tokenize(self, text: str, add_special: bool) -> list[int]:
        answer = await self.http.request(
            "POST", "/tokenize", {"prompt": text, "add_special_tokens": add_special}
        )
        tokens = answer.get("tokens") if isinstance(answer, dict) else None
        if not isinstance(tokens, list):
            raise BackendError(
                f"backend {self.name!r} (sglang): /tokenize answered {str(answer)[:200]!r}"
            )
        return [int(t) for t in tokens]

    async def tokenize(self, text: str) -> list[int]:
        return await self._tokenize(text, False)

    async def detokenize(self, ids: Sequence[int]) -> str:
        answer = await self.http.request(
            "POST", "/detokenize", {"tokens": list(ids), "skip_special_tokens": False}
        )
        text = answer.get("text") if isinstance(answer, dict) else None
        if not isinstance(text, str):
            raise BackendError(
                f"backend {self.name!r} (sglang): /detokenize answered {str(answer)[:200]!r}"
            )
        return text

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        """Each id's text by ``/detokenize`` (asked once per id for the session)."""
        for i in sorted({i for i in ids if i not in self._pieces}):
            self._pieces[i] = await self.detokenize([i])
        return [self._pieces[i] for i in ids]

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        """Chat: the model folder's chat template (SGLang's own, by default), tokenized as
        it is. Raw: the text (system first), tokenized as ``/generate`` tokenizes a text,
        special tokens added; a BOS so added is spelled out in the text, which is then the
        exact string of its ids."""
        if self.chat:
            chat = PromptInput(user_text, None, True, system=system, thinking=thinking)
            return await self._render_chat(chat)
        text = f"{system}\n\n{user_text}" if system else user_text
        ids = await self._tokenize(text, True)
        if self._bos is not None and ids[:1] == [self._bos[0]]:
            text = self._bos[1] + text
        return PromptInput(text, tuple(ids), False, None, system=system, thinking=thinking)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """Chat: the model folder's chat template over every turn and the tools, tokenized
        as :meth:`render` tokenizes; raw text has no turns and no tools (only a
        ``[system?, user]`` list)."""
        if self.chat:
            return await self._render_chat(chat_input(messages, thinking, tools, tool_choice))
        return await super().render_messages(messages, thinking, tools=tools)

    async def _render_chat(self, chat: PromptInput) -> PromptInput:
        """``chat``'s messages through the chat template, tokenized as they are."""
        text = await self.templated_text(chat)
        ids = await self._tokenize(text, False)
        return dataclasses.replace(chat, text=text, token_ids=tuple(ids))

    async def accepts_token_ids(self, prompt: PromptInput) -> bool:
        """The server's tokenizer reproduces ``prompt``'s ids from its text."""
        if prompt.token_ids is None:
            return False
        return tuple(await self._tokenize(prompt.text, False)) == prompt.token_ids

    async def prompt_ids(self, prompt: PromptInput) -> list[int] | None:
        """The rendered ids (``/generate`` is sent exactly these)."""
        return None if prompt.token_ids is None else list(prompt.token_ids)

    def _body(
        self, prompt: PromptInput, params: GenerationParams, *, stream: bool = False
    ) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": params.max_tokens,
            "temperature": params.temperature,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        fields = openai_fields(params, TAKEN["sglang"])
        if "min_tokens" in fields:
            fields["min_new_tokens"] = fields.pop("min_tokens")
        sampling.update(fields)
        body: dict[str, Any] = {
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,
            "top_logprobs_num": params.logprobs or self.top_k,
            "return_text_in_logprobs": True,
            "stream": stream,
        }
        if prompt.token_ids is not None:
            body["input_ids"] = list(prompt.token_ids)
        else:
            body["text"] = prompt.text
        return body

    async def _generate_request(self, body: dict[str, Any]) -> dict[str, Any]:
        answer = await self.http.request("POST", "/generate", body)
        if not isinstance(answer, dict):
            raise BackendError(
                f"backend {self.name!r} (sglang): /generate answered {str(answer)[:200]!r}"
            )
        return answer

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        started = time.perf_counter()
        body = self._body(prompt, params)
        answer = await self._generate_request(body)
        generation = self._generation(answer)
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body.get("input_ids")))

    async def generate_stream(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """The same ``/generate`` request with ``stream: true`` (SSE), assembled: by default
        every event carries the whole answer so far; a server started with
        ``--incremental-streaming-output`` sends deltas, which are concatenated."""
        started = time.perf_counter()
        body = self._body(prompt, params, stream=True)
        events = [e async for e in self.http.stream("/generate", body)]
        generation = self._generation(assemble_events(self.name, events))
        generation.elapsed_s = time.perf_counter() - started
        return check_prompt_count(self, generation, sent_ids(body.get("input_ids")))

    def _generation(self, answer: dict[str, Any]) -> Generation:
        try:
            generation = native_generation(answer)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(
                f"backend {self.name!r} (sglang): /generate answered an unexpected shape "
                f"({type(exc).__name__}: {exc}): {json.dumps(answer)[:300]}"
            ) from exc
        cached = answer["meta_info"].get("cached_tokens")
        if isinstance(cached, int):
            self.observed["cached_tokens"] += cached
        return generation

    async def score_top_k(
        self, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        """Teacher-forced: at each position of ``continuation_ids``, its logprob and the top
        ``top_k`` of the distribution after ``prompt_ids`` and the continuation before it."""
        return await self._teacher_forced(prompt_ids, continuation_ids, self.top_k)

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Full-vocabulary rows, shape (len(continuation), V): the top V of each position
        (only when the vocabulary size is known and at most the scoring limit)."""
        if not self.capabilities.teacher_forcing or self.n_vocab is None:
            raise BackendError(
                f"backend {self.name!r} ({self.kind}) cannot score teacher-forced: full rows "
                f"need a known vocabulary of at most the scoring limit ({self.n_vocab})"
            )
        rows = await self._teacher_forced(prompt_ids, continuation_ids, self.n_vocab)
        return full_rows(self.name, rows, self.n_vocab)

    async def _teacher_forced(
        self, prompt_ids: list[int], continuation_ids: list[int], k: int
    ) -> list[TopKRow]:
        if not continuation_ids:
            return []
        if not prompt_ids:
            raise BackendError(f"backend {self.name!r} (sglang): scoring needs a prompt")
        body = {
            "input_ids": [*prompt_ids, *continuation_ids],
            "sampling_params": {"max_new_tokens": 1, "temperature": 0.0},
            "return_logprob": True,
            "logprob_start_len": len(prompt_ids) - 1,
            "top_logprobs_num": k,
        }
        answer = await self._generate_request(body)
        try:
            return input_rows(answer["meta_info"], continuation_ids)
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise BackendError(
                f"backend {self.name!r} (sglang): teacher-forced scoring: {exc}"
            ) from exc

    async def send_hostile(self, kind: str) -> str:
        def body(text: str, max_tokens: int) -> dict[str, Any]:
            return {
                "text": text,
                "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
            }

        return await send_hostile(self.http, kind, "/generate", body, n_ctx=self.context_size())

    async def prompt_token_count(self, prompt: PromptInput) -> int | None:
        """``meta_info.prompt_tokens`` of a one-token greedy ``/generate`` of ``prompt``."""
        body = self._body(prompt, GenerationParams(max_tokens=1))
        body["return_logprob"] = False
        meta = (await self._generate_request(body)).get("meta_info")
        count = meta.get("prompt_tokens") if isinstance(meta, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None

    def identity(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "url": self.http.settings.base_url,
            "version": self.server_info.get("version"),
            "model_path": self.model_info.get("model_path"),
            "tokenizer_path": self.model_info.get("tokenizer_path"),
            "n_vocab": self.n_vocab,
            "observed": dict(self.observed),
        }


def create(
    name: str, spec: SglangSpec, source: str, revision: str | None, url: str | None
) -> SglangBackend:
    """The ``sglang`` backend of a ``backends:`` entry (see :mod:`.registry`): raw prompts
    unless ``chat: true``; the model is ``model_name`` or the model's source."""
    settings = HttpSettings.of(spec, url)
    return SglangBackend(name, settings, model=spec.model_name or source, chat=bool(spec.chat))


def _logprob(value: Any) -> float:
    """A logprob of an entry; None (no distribution predicts it) is NaN, a violation."""
    return math.nan if value is None else float(value)


def _top(entries: Any) -> dict[int, float]:
    """A top-k list of ``(logprob, token_id, text)`` tuples by id; None is no entries."""
    return {int(e[1]): _logprob(e[0]) for e in entries or []}


def native_generation(answer: dict[str, Any]) -> Generation:
    """A ``/generate`` answer as a :class:`Generation`: ids from ``output_ids`` (or, from a
    server that sends none, from the output logprob entries), which must agree with the
    entries' ids; finish reason ``stop`` / ``length``; an ``abort`` raises."""
    meta = answer["meta_info"]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if kind == "abort":
        raise ValueError(f"the request was aborted: {finish.get('message')!r}")
    entries = meta.get("output_token_logprobs") or []
    ids = [int(e[1]) for e in entries]
    output_ids = answer.get("output_ids")
    if output_ids is not None:
        if entries and [int(t) for t in output_ids] != ids:
            raise ValueError(f"output_ids {output_ids} differ from the logprob entries' {ids}")
        ids = [int(t) for t in output_ids]
    tops = meta.get("output_top_logprobs") or []
    completion = meta.get("completion_tokens")
    return Generation(
        text=str(answer.get("text") or ""),
        token_ids=ids,
        finish_reason="stop" if kind == "stop" else "length",
        chosen_logprobs=[_logprob(e[0]) for e in entries] if entries else None,
        top_logprobs=[_top(t) for t in tops] if tops else None,
        top_keys="id",
        prompt_tokens=meta.get("prompt_tokens"),
        completion_tokens=completion if isinstance(completion, int) else None,
    )


def input_rows(meta: dict[str, Any], continuation_ids: list[int]) -> list[TopKRow]:
    """The continuation's rows of a teacher-forced answer: its last ``len(continuation)``
    input entries, whose ids must be the continuation's, with their top-k lists."""
    n = len(continuation_ids)
    entries = meta.get("input_token_logprobs") or []
    tops = meta.get("input_top_logprobs") or []
    if len(entries) < n or len(tops) < n:
        raise ValueError(
            f"{len(entries)} input logprob entries and {len(tops)} top-k lists for "
            f"{n} continuation tokens"
        )
    entries, tops = entries[-n:], tops[-n:]
    ids = [int(e[1]) for e in entries]
    if ids != list(continuation_ids):
        raise ValueError(f"the input entries' ids {ids} do not match the continuation")
    return [TopKRow(_logprob(e[0]), _top(t)) for e, t in zip(entries, tops, strict=True)]


def full_rows(name: str, rows: list[TopKRow], n_vocab: int) -> np.ndarray:
    """Top-V rows as a float32 array (T, V); a row missing ids is an error."""
    out = np.full((len(rows), n_vocab), -np.inf, dtype=np.float32)
    for t, row in enumerate(rows):
        if len(row.top) != n_vocab or not all(0 <= i < n_vocab for i in row.top):
            raise BackendError(
                f"backend {name!r} (sglang): position {t} has {len(row.top)} of the "
                f"{n_vocab} ids asked for"
            )
        out[t, list(row.top)] = list(row.top.values())
    return out


def assemble_events(name: str, events: list[Any]) -> dict[str, Any]:
    """A streamed ``/generate``'s events as one answer. Cumulative events (the default):
    the last one, whose ``output_ids`` hold all ``completion_tokens``. Incremental ones:
    their texts, ids and output logprob lists concatenated, the last ``meta_info`` else."""
    answers = [e for e in events if isinstance(e, dict)]
    errors = [e["error"] for e in answers if "error" in e]
    if errors or not answers:
        raise BackendError(f"backend {name!r} (sglang): the stream {errors or 'was empty'}")
    last = answers[-1]
    meta = last.get("meta_info") or {}
    if len(last.get("output_ids") or []) == meta.get("completion_tokens"):
        return dict(last)
    merged_meta = dict(meta)
    for key in ("output_token_logprobs", "output_top_logprobs"):
        merged_meta[key] = [x for a in answers for x in (a.get("meta_info") or {}).get(key) or []]
    return {
        "text": "".join(str(a.get("text") or "") for a in answers),
        "output_ids": [t for a in answers for t in a.get("output_ids") or []],
        "meta_info": merged_meta,
    }
