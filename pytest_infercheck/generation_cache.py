"""The generation cache: generations and teacher-forced scores, each computed once per session
and process, and the backends that compute them. One :class:`GenerationCache` per pytest
process (:mod:`.state`), shared by every check and YAML file, and returned to users' tests by
the ``infercheck_engine`` fixture. It is the process's :class:`~.engines.Engines` (the
backends, one per (model source, revision, backend options), a golden baseline's replay per
file, and the loop they run on) and owns the caches of their work:

- renders per (target, prompt text, system prompt, turns, thinking), and of concrete turn
  lists; conversations filled in per (target, prompt, thinking, generation params);
- whether a target takes another target's token ids as they are, per (target, prompt input);
- generations per (target, prompt input, generation params, run) (``run`` > 0: an
  independent repeat), and teacher-forced rows per (target, prompt ids, continuation ids),
  full ones in an LRU bounded by bytes, top-k ones; each made, or failed, ahead or not;
- a lockstep run's per-position statistics (:mod:`.backends.mlx_lockstep`) per (baseline,
  test, prompt ids, baseline continuation ids), which stand for scoring both;
- per target, whether it may be batched (:class:`BatchingLicence`, probed once).
What a check computes from these is memoised on its run (:class:`~.checks.framework.run.SuiteRun`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .backends import (
    BackendError,
    Generation,
    GenerationParams,
    PromptInput,
)
from .backends.base import TopKRow
from .backends.capabilities import Scoring, TopKScoring
from .cache_keys import (
    BatchingLicence,
    GenerationJob,
    GenerationKey,
    RenderKey,
    ResolvedTarget,
    ScoreJob,
    ScoreKey,
    StatsKey,
    TargetKey,
    render_key,
)
from .conversation import (
    Conversation,
    GeneratedTurn,
    Message,
    concrete,
    generated_indices,
    history,
    prompt_turns,
)
from .engines import Engines
from .servers import ServerPool
from .tools import Tool, canonical_json

if TYPE_CHECKING:
    import numpy as np

    from .metrics.kl import PositionStats
    from .suites import Prompt

SCORE_CACHE_BYTES = 512 * 1024 * 1024


class GenerationCache(Engines):
    """The backends of one process and the caches of their work; see the module docstring."""

    def __init__(
        self,
        servers: ServerPool | None = None,
        score_cache_bytes: int = SCORE_CACHE_BYTES,
        hook: Any = None,
    ) -> None:
        super().__init__(servers, hook)
        self._renders: dict[RenderKey, PromptInput] = {}
        self._failed: dict[Any, BackendError] = {}
        """Render, generation and ``("score", top_k, key)`` keys whose request failed ahead
        of their items: the item that needs one fails with that error, never asks again
        (an engine that refuses once and answers the second time has refused)."""
        self._message_renders: dict[tuple[Any, ...], PromptInput] = {}
        """Renders of concrete turn lists per (target, turns' keys, thinking[, tools])."""
        self._conversations: dict[tuple[RenderKey, tuple[Any, ...]], Conversation] = {}
        self._accepts_ids: dict[tuple[TargetKey, str], bool] = {}
        self._detokenized: dict[tuple[TargetKey, tuple[int, ...]], str | None] = {}
        self._generations: dict[GenerationKey, Generation] = {}
        self._scores: OrderedDict[ScoreKey, np.ndarray] = OrderedDict()
        self._top_k_scores: dict[ScoreKey, list[TopKRow]] = {}
        self._score_bytes = 0
        self._stats: dict[StatsKey, PositionStats] = {}
        self._licences: dict[TargetKey, BatchingLicence] = {}
        self._score_cache_limit = score_cache_bytes

    # -- cached operations ---------------------------------------------------------------------
    def render(self, target: ResolvedTarget, prompt: Prompt, thinking: bool) -> PromptInput:
        """``prompt`` as ``target`` receives it (chat template applied; cached): a
        conversation through :meth:`render_messages`.

        Raises:
            ValueError: ``prompt`` is a conversation with ``generate`` turns, which only
                :meth:`conversation` can fill in (a caller's bug).
        """
        key = render_key(target, prompt, thinking)
        if key in self._failed:
            raise self._failed[key]
        if key not in self._renders:
            if prompt.messages is None and not prompt.tools:
                coro = target.backend.render(prompt.text, prompt.system, thinking)
                self._renders[key] = self.call(target, coro)
            elif prompt.messages is None:
                messages = concrete(prompt_turns(prompt), {})
                self._renders[key] = self.render_turns(target, prompt, messages, thinking)
            elif generated_indices(prompt.messages):
                raise ValueError(
                    f"prompt {prompt.id!r} has generate turns: fill it in with conversation()"
                )
            else:
                messages = concrete(prompt.messages, {})
                self._renders[key] = self.render_turns(target, prompt, messages, thinking)
        return self._renders[key]

    def render_messages(
        self,
        target: ResolvedTarget,
        messages: Sequence[Message],
        thinking: bool,
        *,
        tools: Sequence[Tool] = (),
        tool_choice: str | Mapping[str, Any] | None = None,
    ) -> PromptInput:
        """The concrete turns ``messages`` (with ``tools`` offered) as ``target`` receives
        them (:meth:`~.backends.base.Backend.render_messages`; cached)."""
        key: tuple[Any, ...] = (target.key, tuple(m.key() for m in messages), thinking)
        if tools or tool_choice is not None:
            offer = canonical_json({"tools": [t.openai() for t in tools], "choice": tool_choice})
            key = (*key, offer)
        if key not in self._message_renders:
            if tools or tool_choice is not None:
                coro = target.backend.render_messages(
                    messages, thinking, tools=tools, tool_choice=tool_choice
                )
            else:
                coro = target.backend.render_messages(messages, thinking)
            self._message_renders[key] = self.call(target, coro)
        return self._message_renders[key]

    def render_turns(
        self,
        target: ResolvedTarget,
        prompt: Prompt,
        messages: Sequence[Message],
        thinking: bool,
    ) -> PromptInput:
        """:meth:`render_messages` of turns of ``prompt``'s conversation, with its tools
        (cached); an error names the prompt."""
        try:
            return self.render_messages(
                target, messages, thinking, tools=prompt.tools, tool_choice=prompt.tool_choice
            )
        except BackendError as exc:
            raise BackendError(f"prompt {prompt.id} ({prompt.source}): {exc}") from exc

    def conversation(
        self, target: ResolvedTarget, prompt: Prompt, thinking: bool, params: GenerationParams
    ) -> Conversation:
        """``prompt``'s conversation filled in by ``target`` (cached per target, prompt,
        thinking and params): turn by turn, each ``generate`` turn is the target's
        generation (through :meth:`generate`, with ``params``) of the concrete turns before
        it, and its text is fed back as that turn; ``final`` renders every turn. A prompt
        without ``generate`` turns has none to fill (``final`` is :meth:`render`)."""
        key = (render_key(target, prompt, thinking), params.key())
        if key not in self._conversations:
            turns = prompt.messages
            if turns is None:
                self._conversations[key] = Conversation(
                    (), (), (), self.render(target, prompt, thinking)
                )
                return self._conversations[key]
            filled: dict[int, str] = {}
            generated: list[GeneratedTurn] = []
            for index in generated_indices(turns):
                before = history(turns, index, filled)
                rendered = self.render_turns(target, prompt, before, thinking)
                generation = self.generate(target, rendered, params)
                filled[index] = generation.text
                generated.append(GeneratedTurn(index, rendered, generation))
            messages = concrete(turns, filled)
            final = self.render_turns(target, prompt, messages, thinking)
            self._conversations[key] = Conversation(turns, tuple(generated), messages, final)
        return self._conversations[key]

    def render_many(
        self, target: ResolvedTarget, prompts: Sequence[Prompt], thinking: bool
    ) -> None:
        """Render ``prompts`` for ``target`` ahead of their items, concurrently on a concurrent
        backend (bounded by its own ``max_concurrency``); the same renders, cached as
        :meth:`render` caches them. The item that needs a failed render
        fails with the same error (:attr:`_failed`), without asking again."""
        if target.backend.concurrency <= 1:
            return
        missing = list(
            dict.fromkeys(
                p
                for p in prompts
                if p.messages is None and render_key(target, p, thinking) not in self._renders
            )
        )
        results = self._settled(
            [
                target.backend.render(p.text, p.system, thinking)
                if not p.tools
                else target.backend.render_messages(
                    concrete(prompt_turns(p), {}),
                    thinking,
                    tools=p.tools,
                    tool_choice=p.tool_choice,
                )
                for p in missing
            ]
        )
        for prompt, result in zip(missing, results, strict=True):
            if isinstance(result, PromptInput):
                self._renders[render_key(target, prompt, thinking)] = result
            elif isinstance(result, BackendError):
                self._failed[render_key(target, prompt, thinking)] = result

    def detokenize(self, target: ResolvedTarget, ids: Sequence[int]) -> str | None:
        """``target``'s text of ``ids`` (cached; None: its engine exposes no tokenizer)."""
        key = (target.key, tuple(ids))
        if key not in self._detokenized:
            self._detokenized[key] = self.call(target, target.backend.detokenize(ids))
        return self._detokenized[key]

    def look_up_ahead(
        self, target: ResolvedTarget, pieces: Sequence[int], texts: Sequence[Sequence[int]]
    ) -> None:
        """Ask a concurrent (HTTP) backend at once, ahead of the items that need them, for
        the texts of ``texts`` (kept here, :meth:`detokenize`) and the pieces of ``pieces``
        (llama-server keeps each id's piece for the session; other engines name ids from a
        local tokenizer or not at all); an in-process backend answers as it is asked. A
        failure is not kept: the item that needs the answer asks again and meets it."""
        if target.backend.concurrency <= 1:
            return
        keys = dict.fromkeys((target.key, tuple(ids)) for ids in texts)
        missing = [key for key in keys if key not in self._detokenized]
        coros: list[Coroutine[Any, Any, Any]] = [target.backend.detokenize(k[1]) for k in missing]
        if pieces:
            coros.append(target.backend.token_pieces(sorted(set(pieces))))
        results = self._settled(coros)
        for key, text in zip(missing, results[: len(missing)], strict=True):
            if text is None or isinstance(text, str):
                self._detokenized[key] = text

    def accepts_ids_ahead(self, target: ResolvedTarget, prompts: Sequence[PromptInput]) -> None:
        """Ask a concurrent (HTTP) backend at once what :meth:`accepts_ids` asks of each of
        ``prompts``, kept as it keeps it; a failure is kept as the item's (never asked again)."""
        found = {p.key(): p for p in prompts if (target.key, p.key()) not in self._accepts_ids}
        if target.backend.concurrency <= 1 or not found:
            return
        results = self._settled([target.backend.accepts_token_ids(p) for p in found.values()])
        for key, result in zip(found, results, strict=True):
            if isinstance(result, BackendError):
                self._failed[("accepts", target.key, key)] = result
            elif isinstance(result, bool):
                self._accepts_ids[(target.key, key)] = result

    def accepts_ids(self, target: ResolvedTarget, prompt: PromptInput) -> bool:
        """Whether ``target`` can take ``prompt``'s token ids as they are (cached)."""
        key = (target.key, prompt.key())
        if (failed := self._failed.get(("accepts", *key))) is not None:
            raise failed
        if key not in self._accepts_ids:
            accepts = self.call(target, target.backend.accepts_token_ids(prompt))
            self._accepts_ids[key] = bool(accepts)
        return self._accepts_ids[key]

    def generate(
        self,
        target: ResolvedTarget,
        prompt: PromptInput,
        params: GenerationParams,
        run: int = 0,
    ) -> Generation:
        """``target``'s generation of ``prompt`` (cached; ``run`` > 0: an independent
        repeat)."""
        key = (target.key, prompt.key(), params.key(), run)
        if key in self._failed:
            raise self._failed[key]
        if key not in self._generations:
            generation = self.call(target, target.backend.generate(prompt, params))
            self._generations[key] = generation
        return self._generations[key]

    def has_generation(
        self, target: ResolvedTarget, prompt: PromptInput, params: GenerationParams, run: int = 0
    ) -> bool:
        """Whether ``target``'s generation of ``prompt`` (``run``) is cached."""
        return (target.key, prompt.key(), params.key(), run) in self._generations

    def put_generation(
        self,
        target: ResolvedTarget,
        prompt: PromptInput,
        params: GenerationParams,
        generation: Generation,
        run: int = 0,
    ) -> None:
        """Cache a generation computed elsewhere (a batch, a lockstep run); one already
        cached is kept (what a check has seen stays what every check sees)."""
        self._generations.setdefault((target.key, prompt.key(), params.key(), run), generation)

    def put_position_stats(
        self,
        baseline: ResolvedTarget,
        test: ResolvedTarget,
        prompt_ids: list[int],
        continuation_ids: list[int],
        stats: PositionStats,
    ) -> None:
        """The per-position statistics of ``test`` against ``baseline`` over the baseline's
        continuation, accumulated by a lockstep run instead of scoring both sides."""
        key = (baseline.key, test.key, tuple(prompt_ids), tuple(continuation_ids))
        self._stats[key] = stats

    def position_stats(
        self,
        baseline: ResolvedTarget,
        test: ResolvedTarget,
        prompt_ids: list[int],
        continuation_ids: list[int],
    ) -> PositionStats | None:
        """What :meth:`put_position_stats` stored for exactly these ids, or None."""
        return self._stats.get((baseline.key, test.key, tuple(prompt_ids), tuple(continuation_ids)))

    def licence(
        self, target: ResolvedTarget, decide: Callable[[], BatchingLicence]
    ) -> BatchingLicence:
        """Whether ``target`` may be batched: ``decide()`` (a probe) once per process."""
        if target.key not in self._licences:
            self._licences[target.key] = decide()
        return self._licences[target.key]

    def prefetch(
        self,
        target: ResolvedTarget,
        jobs: list[tuple[PromptInput, GenerationParams]],
        runs: int = 1,
        scores: Sequence[ScoreJob] = (),
    ) -> dict[tuple[str, tuple[Any, ...], int], BackendError]:
        """Generate ``jobs`` (each as runs ``0 .. runs-1``) concurrently on a concurrent
        backend (bounded by its own ``max_concurrency``), filling the cache; an in-process
        backend is left to generate item by item. ``scores``: teacher-forced scorings
        (:class:`ScoreJob`) sent in the same burst as the generations, so that the server
        batches them together; each kept as :meth:`score` / :meth:`score_top_k` keep theirs,
        a failed one not kept (the item that needs it asks again and meets the error).

        Returns the jobs that failed with a :class:`BackendError`, keyed by
        ``(prompt.key(), params.key(), run)``, for checks that count errors (determinism);
        others may ignore it: the item that needs a failed job fails with its error
        (:meth:`generate` raises it), without asking the engine again."""
        if target.backend.concurrency <= 1:
            return {}
        missing = [
            (prompt, params, run)
            for prompt, params in dict.fromkeys(jobs)
            for run in range(runs)
            if (target.key, prompt.key(), params.key(), run) not in self._generations
        ]

        scoring = [job for job in dict.fromkeys(scores) if not self.has_scored(target, job)]
        with self.watching(target):
            results = self._settled(
                [
                    *(target.backend.generate(p, params) for p, params, _ in missing),
                    *(job.run(target.backend) for job in scoring),
                ]
            )
        for job, scored in zip(scoring, results[len(missing) :], strict=True):
            self.put_scored(target, job, scored)
        failures: dict[tuple[str, tuple[Any, ...], int], BackendError] = {}
        for (prompt, params, run), result in zip(missing, results[: len(missing)], strict=True):
            if (error := self.put_result(target, (prompt, params, run), result)) is not None:
                failures[(prompt.key(), params.key(), run)] = error
        return failures

    def put_result(self, target: ResolvedTarget, job: GenerationJob, result: Any) -> Any:
        """Keep a generation made ahead of ``job`` (prompt, params, run), or its
        :class:`BackendError` (returned) as the item's; anything else is not kept."""
        key = (target.key, job[0].key(), job[1].key(), job[2])
        if isinstance(result, Generation):
            self._generations[key] = result
        elif isinstance(result, BackendError):
            self._failed[key] = result
            return result
        return None

    def has_scored(self, target: ResolvedTarget, job: ScoreJob) -> bool:
        return job.key(target) in (self._top_k_scores if job.top_k else self._scores)

    def put_scored(self, target: ResolvedTarget, job: ScoreJob, scored: Any) -> None:
        """Keep a scoring made ahead, or its :class:`BackendError` as the item's (never asked
        again, as a generation's); any other exception is not kept."""
        if isinstance(scored, BackendError):
            self._failed[("score", job.top_k, job.key(target))] = scored
        elif job.top_k and not isinstance(scored, BaseException):
            self._top_k_scores[job.key(target)] = scored
        elif not isinstance(scored, BaseException):
            self.put_score(job.key(target), scored)

    def put_score(self, key: ScoreKey, rows: np.ndarray, *, if_fits: bool = False) -> bool:
        """Keep ``rows`` as the teacher-forced rows of ``key`` in the byte-bounded LRU, evicting
        the oldest; ``if_fits`` (rows shared): only if they fit, evicting none. Whether kept."""
        if key in self._scores:
            return True
        if if_fits and self._score_bytes + rows.nbytes > self._score_cache_limit:
            return False
        self._scores[key] = rows
        self._score_bytes += rows.nbytes
        while self._score_bytes > self._score_cache_limit and len(self._scores) > 1:
            _, evicted = self._scores.popitem(last=False)
            self._score_bytes -= evicted.nbytes
        return key in self._scores

    def score(
        self, target: ResolvedTarget, prompt_ids: list[int], continuation_ids: list[int]
    ) -> np.ndarray:
        """``target``'s teacher-forced log-probabilities of ``continuation_ids`` after
        ``prompt_ids``, ``(T, V)`` (cached in the byte-bounded LRU)."""
        key = (target.key, tuple(prompt_ids), tuple(continuation_ids))
        if (failed := self._failed.get(("score", False, key))) is not None:
            raise failed
        cached = self._scores.get(key)
        if cached is not None:
            self._scores.move_to_end(key)
            return cached
        backend = target.backend
        if not isinstance(backend, Scoring):
            raise BackendError(
                f"backend {backend.name!r} ({backend.kind}) cannot score teacher-forced"
            )
        result = self.call(target, backend.score(prompt_ids, continuation_ids))
        self.put_score(key, result)
        return result

    def score_top_k(
        self, target: ResolvedTarget, prompt_ids: list[int], continuation_ids: list[int]
    ) -> list[TopKRow]:
        """``target``'s teacher-forced top-k rows of ``continuation_ids`` after
        ``prompt_ids`` (:meth:`~.backends.base.Backend.score_top_k`), cached: a baseline
        scored by its top k against several test sides is asked once."""
        key = (target.key, tuple(prompt_ids), tuple(continuation_ids))
        if (failed := self._failed.get(("score", True, key))) is not None:
            raise failed
        if key not in self._top_k_scores:
            backend = target.backend
            if not isinstance(backend, TopKScoring):
                raise BackendError(
                    f"backend {backend.name!r} ({backend.kind}) cannot score top-k teacher-forced"
                )
            self._top_k_scores[key] = self.call(
                target, backend.score_top_k(prompt_ids, continuation_ids)
            )
        return self._top_k_scores[key]

    def close(self) -> None:
        """Close every backend (wrappers and the backends they wrap) and the loop."""
        if self._backends:
            for backend in self._backends.values():
                self.run(backend.aclose())
            self._backends.clear()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.close()
