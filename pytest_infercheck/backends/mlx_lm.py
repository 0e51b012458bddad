"""mlx-lm in-process backend: greedy generation and one-pass teacher-forced scoring.

Models load lazily, once per process, shared by every backend naming the same weights.
Generation: ``mlx_lm.generate_step`` (greedy without a sampler), stops at any EOS id, honours
``max_tokens``. Scoring: one pass over prompt + continuation, row ``i`` the float32 log-softmax
at position ``len(prompt) - 1 + i``; or a generation's own rows, shared (:mod:`.mlx_rows`).

The backend's options (:class:`~.options.MlxLmOptions`) apply on every path that generates
or scores for it, never a plain cache in their place:

- ``generate``: ``speculative_generate_step`` with the draft model, else ``generate_step``
  with the cache options; its :class:`~pytest_infercheck.features.FeatureActivity` counts
  drafted and accepted tokens (mlx-lm's ``from_draft``) and reads the KV bits in use from
  the cache objects after the generation;
- ``generate_batch``: mlx-lm's ``BatchGenerator`` applies neither a draft model nor a
  quantized cache, so such a backend generates its batch one prompt at a time (its
  ``batching`` says so); ``prefill_step_size`` and ``max_kv_size`` go to the generator;
- the comparisons' lockstep (:mod:`.mlx_lockstep`) steps plain caches only: a backend with
  any option does not step (:meth:`MlxLmBackend.stepper` is None), so its comparisons
  generate and score it separately;
- ``score``: with cache options (``kv_bits``, ``max_kv_size``, ``prefill_step_size``), the
  rows come from ``generate_step`` itself fed the given continuation (a sampler that picks
  it), so each row is computed through the same (quantized, rotating) cache as a generation
  of those tokens; a draft model does not change the target's distribution (speculative
  decoding accepts a drafted token only where it is the target's own greedy choice, and the
  target scores every position), so it scores as the target.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..features import FeatureActivity, drafted_tokens
from ..tools import Tool
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
from .mlx_batch import generate_together
from .mlx_load import _LOADED as _LOADED
from .mlx_load import Loaded, MlxModelSpec, load_model, token_piece, version
from .mlx_rows import generate_with_rows
from .mlx_sampling import mlx_processors, mlx_sampler, raw_logits, sample_next, top_rows
from .params import check_taken

if TYPE_CHECKING:
    from .mlx_lockstep import Stepper
    from .options import MlxLmOptions
    from .spec import MlxLmSpec


class MlxLmBackend(Backend):
    """mlx-lm running in this process."""

    kind = "mlx-lm"
    batching = "mlx-lm BatchGenerator"
    """How :meth:`generate_batch` batches (shown by the batch-invariance check)."""

    def __init__(
        self,
        name: str,
        spec: MlxModelSpec,
        *,
        chat: bool | None = None,
        add_bos: bool = True,
        options: MlxLmOptions | None = None,
    ) -> None:
        super().__init__(name)
        self.spec = spec
        self.chat = chat
        self.add_bos = add_bos
        from .options import MlxLmOptions

        self.options = options if options is not None else MlxLmOptions()
        draft = self.options.draft_model
        self.draft = None if draft is None else MlxModelSpec(draft)
        if not self._batches:
            self.batching = (
                "one prompt at a time (mlx-lm's BatchGenerator applies no draft model or "
                "quantized KV cache)"
            )
        self._kept: tuple[list[Any], list[int]] | None = None
        """The prompt cache kept between :meth:`generate_cached` calls and the token ids it
        holds, as ``mlx_lm.server`` keeps one (None until the first)."""

    @property
    def _batches(self) -> bool:
        """Whether ``BatchGenerator`` applies this backend's options (no draft, no kv_bits)."""
        return self.draft is None and self.options.kv_bits is None

    def _draft_model(self) -> Any:
        """The draft model (loaded once), which must share the target's tokenizer."""
        assert self.draft is not None
        draft = load_model(self.draft)
        if draft.fingerprint != self._loaded.fingerprint:
            raise BackendError(
                f"backend {self.name!r}: the draft model {self.draft.source} has another "
                "tokenizer than the target"
            )
        return draft.model

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return Capabilities.token_level(0, self._uses_chat_template())

    @property
    def _loaded(self) -> Loaded:
        return load_model(self.spec)

    def _uses_chat_template(self) -> bool:
        has_template = bool(getattr(self._loaded.tokenizer, "has_chat_template", False))
        return has_template if self.chat is None else (self.chat and has_template)

    def tokenizer_fingerprint(self) -> str:
        return self._loaded.fingerprint

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return self.render_sync(user_text, system, thinking)

    async def render_messages(
        self,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """The chat template applied over every turn and the tools (with the generation
        prompt; ``apply_chat_template(messages, tools=[...])``), then tokenized as
        :meth:`render_sync` tokenizes a templated prompt; a ``[system?, user]`` list without
        tools is :meth:`render_sync`. A conversation or tools without a chat template is an
        error. ``tool_choice`` is kept on the rendered input (a template does not see it)."""
        one = single_turn(messages)
        if one is not None and not tools:
            return self.render_sync(one[1], one[0], thinking)
        if not self._uses_chat_template():
            if one is None:
                raise self.no_conversation(messages, "the model is used without a chat template")
            raise self.no_tools(tools, "the model is used without a chat template")
        text, ids = self._apply_template(messages, thinking, tools)
        chat = chat_input(messages, thinking, tools, tool_choice)
        return dataclasses.replace(
            chat, text=text, token_ids=tuple(ids), tokenizer_fingerprint=self._loaded.fingerprint
        )

    def _apply_template(
        self, messages: Sequence[Message], thinking: bool, tools: Sequence[Tool] = ()
    ) -> tuple[str, list[int]]:
        """The chat template over ``messages`` (and ``tools``, as OpenAI function schemas;
        calls' arguments as JSON objects, transformers' convention and what vLLM and
        llama.cpp hand their templates) with the generation prompt, and its ids (the template
        spells out its special tokens: nothing is added)."""
        tokenizer = self._loaded.tokenizer
        offer = {"tools": [tool.openai() for tool in tools]} if tools else {}
        text = tokenizer.apply_chat_template(
            openai_messages(messages, object_arguments=True),
            add_generation_prompt=True,
            tokenize=False,
            enable_thinking=thinking,
            **offer,
        )
        return str(text), list(tokenizer.encode(text, add_special_tokens=False))

    def render_sync(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        """Chat template (when used) applied once, then tokenized; BOS added in raw mode."""
        tokenizer = self._loaded.tokenizer
        if self._uses_chat_template():
            turns = [Message("system", system)] if system else []
            text, ids = self._apply_template([*turns, Message("user", user_text)], thinking)
            templated = True
        else:
            text = f"{system}\n\n{user_text}" if system else user_text
            ids = list(tokenizer.encode(text, add_special_tokens=True))
            bos = tokenizer.bos_token_id
            if self.add_bos and bos is not None and (not ids or ids[0] != bos):
                ids.insert(0, bos)
                text = tokenizer.decode(ids)  # the exact string of the ids, "<s>" included
            elif (
                bos is not None
                and ids[:1] == [bos]
                and not text.startswith(bos_text := str(tokenizer.bos_token))
            ):
                # The tokenizer added the BOS itself (Llama 3's post-processor): spell it out.
                text = bos_text + text
            templated = False
        return PromptInput(
            text, tuple(ids), templated, self._loaded.fingerprint, system=system, thinking=thinking
        )

    async def tokenize(self, text: str) -> list[int]:
        return list(self._loaded.tokenizer.encode(text, add_special_tokens=False))

    async def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._loaded.tokenizer.decode(list(ids)))

    async def token_pieces(self, ids: Sequence[int]) -> list[str]:
        tokenizer = self._loaded.tokenizer
        raw = tokenizer.convert_ids_to_tokens(list(ids))
        return [
            token_piece(str(tokenizer.decode([i])), str(symbol))
            for i, symbol in zip(ids, raw, strict=True)
        ]

    def _prompt_ids(self, prompt: PromptInput) -> list[int]:
        if prompt.token_ids is not None and prompt.tokenizer_fingerprint in (
            None,
            self._loaded.fingerprint,
        ):
            return list(prompt.token_ids)
        return list(self._loaded.tokenizer.encode(prompt.text, add_special_tokens=False))

    async def generate_base(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate` by the same weights loaded without the adapter."""
        spec = dataclasses.replace(self.spec, adapter=None)
        twin = MlxLmBackend(
            self.name, spec, chat=self.chat, add_bos=self.add_bos, options=self.options
        )
        return await twin.generate(prompt, params)

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        return self.generate_sync(prompt, params)

    async def generate_with_rows(self, prompt: PromptInput, params: GenerationParams) -> Any:
        """:func:`.mlx_rows.generate_with_rows`: the generation and, shared, its rows."""
        return generate_with_rows(self, prompt, params)

    sample_next = sample_next  # NextTokenSampling: one forward pass, many draws
    raw_logits = raw_logits  # RawLogits: the rows before the softmax

    async def generate_uncached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """:meth:`generate`: a fresh prompt cache (and the kept one left as it is)."""
        return self.generate_sync(prompt, params)

    async def generate_cached(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        """Generation reusing the kept prompt cache, as ``mlx_lm.server`` does: the cache is
        trimmed to the longest common prefix of its tokens and the prompt (at least one prompt
        token is always fed), the rest is prefilled, and the cache is kept with what it then
        holds; ``cached_tokens`` is the reused prefix's length."""
        return self.generate_sync(prompt, params, kept=True)

    async def cache_capacity(self) -> int:
        """0: the kept prompt cache holds the last request only (any other prompt evicts all
        of it but the prefix they share)."""
        return 0

    def _reuse(self, prompt_ids: list[int]) -> tuple[list[Any], int]:
        """The kept prompt cache trimmed to its longest common prefix with ``prompt_ids``
        (one token short of the whole prompt, so that one is fed), and that prefix's length;
        a new cache when none is kept or it cannot be trimmed."""
        from mlx_lm.models.cache import can_trim_prompt_cache, make_prompt_cache, trim_prompt_cache

        if self._kept is not None and can_trim_prompt_cache(self._kept[0]):
            cache, held = self._kept
            common = 0
            for a, b in zip(held, prompt_ids[:-1], strict=False):
                if a != b:
                    break
                common += 1
            trim_prompt_cache(cache, len(held) - common)
            return cache, common
        return make_prompt_cache(self._loaded.model, max_kv_size=self.options.max_kv_size), 0

    def generate_sync(
        self,
        prompt: PromptInput,
        params: GenerationParams,
        *,
        full_logprobs: bool = False,
        kept: bool = False,
    ) -> Generation:
        """Greedy generation. Each step's chosen-token logprob is gathered inside mlx (cheap
        whatever the vocabulary; comparisons use teacher-forced full-vocabulary scores, so no
        per-step top-k is kept); with ``full_logprobs`` the float32 per-step full-vocabulary
        logprobs are also returned, in ``full_logprobs`` (T, V). With ``kept``, through the
        kept prompt cache (:meth:`generate_cached`); else a fresh one."""
        import mlx.core as mx

        check_taken(self.name, self.kind, self.chat, params)
        loaded = self._loaded
        eos_ids = set(loaded.tokenizer.eos_token_ids)
        prompt_ids = self._prompt_ids(prompt)
        if not prompt_ids:
            raise BackendError(f"backend {self.name!r}: the prompt encodes to zero tokens")
        cache, reused = self._reuse(prompt_ids) if kept else ([], 0)
        if params.seed is not None:
            mx.random.seed(params.seed)
        sampler = mlx_sampler(params)
        started = time.perf_counter()
        tokens: list[int] = []
        chosen: list[Any] = []
        steps: list[Any] = []
        finish = "length"
        from_draft: list[bool] = []
        rows = full_logprobs or params.logprobs is not None
        if params.max_tokens > 0:
            steps_taken = self._steps(
                prompt_ids, reused, params.max_tokens, sampler, cache, mlx_processors(params)
            )
            for token, logprobs, drafted in steps_taken:
                tokens.append(int(token))
                chosen.append(logprobs[token])
                from_draft.append(drafted)
                if rows:
                    steps.append(logprobs)
                if token in eos_ids:
                    finish = "stop"
                    break
        full = None
        if rows:
            full = (
                np.array(mx.stack(steps).astype(mx.float32))
                if steps
                else np.zeros((0, 0), dtype=np.float32)
            )
        text_ids = tokens[:-1] if finish == "stop" else tokens
        chosen_values = np.array(mx.stack(chosen).astype(mx.float32)).tolist() if chosen else []
        if kept:
            self._kept = (cache, [*prompt_ids, *tokens][: cache[0].offset])
        return Generation(
            cached_tokens=reused if kept else None,
            text=loaded.tokenizer.decode(text_ids),
            token_ids=tokens,
            finish_reason=finish,
            chosen_logprobs=chosen_values,
            top_logprobs=None if params.logprobs is None else top_rows(full, params.logprobs),
            elapsed_s=time.perf_counter() - started,
            prompt_tokens=len(prompt_ids),
            full_logprobs=full if full_logprobs else None,
            activity=self._activity(from_draft, params.max_tokens, cache),
        )

    def _steps(
        self,
        prompt_ids: list[int],
        reused: int,
        max_tokens: int,
        sampler: Any,
        cache: list[Any],
        processors: list[Any] | None = None,
    ) -> Iterator[tuple[Any, Any, bool]]:
        """``(token, logprobs, from_draft)`` per generated token: ``speculative_generate_step``
        with the draft model, else ``generate_step`` with the cache options through
        ``cache``: a kept cache already holding the first ``reused`` prompt tokens
        (:meth:`_reuse`), or an empty list filled here (a quantization replaces its entries
        in place, so after the generation they are the caches in use)."""
        import mlx.core as mx
        from mlx_lm.generate import generate_step, speculative_generate_step
        from mlx_lm.models.cache import make_prompt_cache

        loaded, options = self._loaded, self.options
        prompt = mx.array(prompt_ids[reused:])
        if self.draft is not None:
            if cache:
                raise BackendError(
                    f"backend {self.name!r}: a kept prompt cache (cache-parity) is not "
                    "supported with a draft model (mlx-lm keeps the draft's cache beside it)"
                )
            for token, logprobs, drafted in speculative_generate_step(
                prompt,
                loaded.model,
                self._draft_model(),
                num_draft_tokens=options.draft_tokens,
                max_tokens=max_tokens,
                sampler=sampler,
                logits_processors=processors,
                **options.cache_options(),
            ):
                yield token, logprobs, bool(drafted)
            return
        if not cache:
            cache.extend(make_prompt_cache(loaded.model, max_kv_size=options.max_kv_size))
        for token, logprobs in generate_step(
            prompt,
            loaded.model,
            max_tokens=max_tokens,
            sampler=sampler,
            logits_processors=processors,
            prompt_cache=cache,
            **options.cache_options(),
        ):
            yield token, logprobs, False

    def _activity(
        self, from_draft: list[bool], max_tokens: int, cache: list[Any]
    ) -> FeatureActivity | None:
        """What this generation's features did (None for a backend without options):
        drafted and accepted tokens, and the KV bits of the caches in use (None: full
        precision)."""
        if self.options.plain_cache:
            return None
        bits = {getattr(c, "bits", None) for c in cache}
        kv_bits = next(iter(bits)) if len(bits) == 1 else None
        if self.draft is None:
            return FeatureActivity(kv_bits=kv_bits, source="mlx-lm cache objects")
        return FeatureActivity(
            drafted=drafted_tokens(from_draft, max_tokens, self.options.draft_tokens),
            accepted=sum(from_draft),
            source="mlx-lm speculative_generate_step (from_draft)",
        )

    async def generate_batch(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        return self.generate_batch_sync(prompts, params)

    def generate_batch_sync(
        self, prompts: list[PromptInput], params: GenerationParams
    ) -> list[Generation | BaseException]:
        """Real batched generation (:func:`~.mlx_batch.generate_together`). A prompt that
        encodes to nothing is its :class:`BackendError`. A backend with a draft model or
        ``kv_bits`` generates each prompt alone (:meth:`generate_sync`): ``BatchGenerator``
        applies neither."""
        if not self._batches or params.written():
            # BatchGenerator takes a sampler, not our logits processors nor top logprobs:
            # a request with any of them is generated one prompt at a time.
            return [_attempt(lambda p=p: self.generate_sync(p, params)) for p in prompts]
        results: list[Generation | BaseException] = []
        batch: list[tuple[int, list[int]]] = []
        for i, prompt in enumerate(prompts):
            ids = self._prompt_ids(prompt)
            results.append(Generation("", [], "length", [], prompt_tokens=len(ids)))
            if not ids:
                results[i] = BackendError(
                    f"backend {self.name!r}: the prompt encodes to zero tokens"
                )
            elif params.max_tokens > 0:
                batch.append((i, ids))
        if not batch:
            return results
        generations = generate_together(
            self._loaded,
            [ids for _, ids in batch],
            params,
            max_kv_size=self.options.max_kv_size,
            prefill_step_size=self.options.prefill_step_size,
        )
        for (i, _), generation in zip(batch, generations, strict=True):
            results[i] = generation
        return results

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        return self.score_sync(prompt_ids, continuation_ids)

    def score_sync(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Float32 log-softmax rows predicting each continuation token: one forward pass,
        or, with cache options, through the backend's own cache (:meth:`_score_cached`)."""
        import mlx.core as mx

        if not continuation_ids:
            return np.zeros((0, 0), dtype=np.float32)
        if not prompt_ids:
            raise BackendError(f"backend {self.name!r}: cannot score with an empty prompt")
        if self.options.cache_options() or self.options.max_kv_size is not None:
            return self._score_cached(prompt_ids, continuation_ids)
        ids = mx.array([*prompt_ids, *continuation_ids])[None]
        start = len(prompt_ids) - 1
        logits = self._loaded.model(ids)[0, start : start + len(continuation_ids)]
        logits = logits.astype(mx.float32)
        logprobs = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        return np.array(logprobs)

    def _score_cached(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        """Teacher-forced rows through the cache a generation uses: ``generate_step`` with
        the backend's cache options and a sampler that picks the next given token, so it
        prefills and steps (and quantizes, and rotates) exactly as when it generated these
        tokens; a logits processor keeps each step's logits, whose float32 log-softmax is
        the row."""
        import mlx.core as mx
        from mlx_lm.generate import generate_step
        from mlx_lm.models.cache import make_prompt_cache

        forced = iter(continuation_ids)
        rows: list[Any] = []

        def keep(_tokens: Any, logits: Any) -> Any:
            rows.append(logits.astype(mx.float32))
            return logits

        def given(_logprobs: Any) -> Any:
            return mx.array([next(forced, 0)], mx.uint32)

        cache = make_prompt_cache(self._loaded.model, max_kv_size=self.options.max_kv_size)
        for _ in generate_step(
            mx.array(prompt_ids),
            self._loaded.model,
            max_tokens=len(continuation_ids),
            sampler=given,
            logits_processors=[keep],
            prompt_cache=cache,
            **self.options.cache_options(),
        ):
            pass
        logits = mx.concatenate(rows[: len(continuation_ids)], axis=0)  # it steps one ahead
        return np.array(logits - mx.logsumexp(logits, axis=-1, keepdims=True))

    def stepper(self) -> Stepper | None:
        """This model for :mod:`.mlx_lockstep` (batched lockstep stepping); None when the
        backend has options, which the lockstep's plain batched caches would not apply."""
        from .mlx_lockstep import Stepper

        if not self.options.plain_cache:
            return None
        loaded = self._loaded
        return Stepper(
            loaded.model,
            frozenset(loaded.tokenizer.eos_token_ids),
            lambda ids: str(loaded.tokenizer.decode(ids)),
        )

    def lockstep_ids(self, prompt: PromptInput) -> list[int]:
        """The token ids this backend generates from for ``prompt`` (as :meth:`generate`)."""
        return self._prompt_ids(prompt)

    def identity(self) -> dict[str, Any]:
        config = self._loaded.config
        return {
            "kind": self.kind,
            "name": self.name,
            "model": self.spec.source,
            "revision": self.spec.revision,
            **({"adapter": self.spec.adapter} if self.spec.adapter else {}),
            "quantization": config.get("quantization"),
            "tokenizer": self._loaded.fingerprint,
            "mlx": version("mlx"),
            "mlx-lm": version("mlx-lm"),
            **({"options": self.options.written()} if not self.options.plain_cache else {}),
        }

    async def special_tokens(self, ids: Sequence[int]) -> set[int]:
        """The tokenizer's special tokens (``all_special_ids`` and added tokens marked
        special) among ``ids``."""
        tokenizer = self._loaded.tokenizer
        special = set(getattr(tokenizer, "all_special_ids", ()))
        added = getattr(tokenizer, "added_tokens_decoder", {})
        special |= {int(i) for i, token in added.items() if getattr(token, "special", False)}
        return {i for i in ids if i in special}


def create(
    name: str,
    spec: MlxLmSpec,
    source: str,
    revision: str | None,
    url: str | None,
    adapter: str | None = None,
) -> MlxLmBackend:
    """The ``mlx-lm`` backend of a ``backends:`` entry (see :mod:`.registry`), with the LoRA
    ``adapter`` folder applied if given."""
    model = MlxModelSpec(source, revision, spec.dtype, adapter)
    return MlxLmBackend(name, model, chat=spec.chat, add_bos=spec.add_bos, options=spec.options)


def _attempt(generate: Any) -> Generation | BaseException:
    """``generate()``, or the exception it raised (a batch's per-prompt result)."""
    try:
        result: Generation = generate()
    except Exception as exc:
        return exc
    return result
