"""Batched lockstep stepping of mlx-lm models: the baseline's greedy generation, the test
models teacher-forced on it as it goes, and each test model's own greedy continuation.

One call (:func:`lockstep`) steps N prompts through a baseline model and K test models
together, each model with one batched KV cache (mlx-lm's ``BatchKVCache``: prompts
right-padded for the prefill, then left-padded, as mlx-lm's ``BatchGenerator`` does):

1. prefill every model with each prompt but its last token;
2. at each step, every model is fed the same token per sequence (the prompt's last token,
   then the baseline's last chosen token): the baseline's greedy token is the argmax of its
   log-softmax in the model's dtype (as ``mlx_lm.generate_step``), and each test model's row
   at that position is compared with the baseline's there, in float32 rows and float64 sums
   (:func:`~pytest_infercheck.metrics.kl.position_stats` on the step's rows: ``KL_t``,
   same top, delta-p; plus each row's logsumexp). Nothing of size T x V is kept: per
   position, only those numbers;
3. a sequence leaves every batch when the baseline stops on an EOS id or reaches its
   ``max_tokens``;
4. up to its first divergence, a test model's greedy tokens are the baseline's (it was fed
   exactly its own tokens); at its first divergence d its own token is the argmax of its row
   at d, its KV cache is copied out (prompt + the shared prefix) and appended to the same
   model's batch as a row of its own (a tail), which continues greedily from there (its own
   continuation) in the same forward passes as the teacher-forced rows, until its EOS or
   ``max_tokens``.

The result per prompt is the baseline's :class:`Generation`, each test model's
:class:`Generation` and :class:`PositionStats` over the baseline's continuation: what a
teacher-forced comparison needs, with no separate scoring pass. The float rounding of
KV-cached stepping differs from one full forward pass (``score_sync``), so the statistics
equal the separately scored ones to a float tolerance, not bit for bit (stated in
``tests/unit/test_lockstep.py``). Batching does not change them: N prompts in one call give
the same numbers as N calls of one prompt (tested bit for bit on CPU), so the unbatched path
is this code at batch size 1.

Several batches can step at once (:func:`lockstep_groups`): each on its own mlx stream, the
forward passes of all of them evaluated by one ``mx.eval`` per step. mlx runs each stream on
its own thread, so on its CPU device N batches use N cores (one batch on one stream used
one core: measured CPU time equal to wall time, mlx 0.32). Comparisons split their prompts
into one batch per core (:func:`cpu_parallelism`); the numbers are those of one batch, bit
for bit (tested).

Fail closed as :func:`~pytest_infercheck.metrics.kl.position_stats`: a row with a NaN or
``+inf``, a row whose logsumexp is not within ``logsumexp_tolerance(V)`` of 0 and a
non-finite ``KL_t`` are problems of the prompt's statistics.
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..metrics.finite import (
    check_values,
    logsumexp_tolerance,
    row_faults,
    row_logsumexp,
    strict_max,
)
from ..metrics.forced import ForcedArgmax, ForcedStats, forced_full
from ..metrics.kl import PositionStats, position_stats
from .base import Generation

PREFILL_STEP = 2048
"""Prompt tokens per prefill forward pass (mlx-lm's default ``prefill_step_size``)."""

Forward = Callable[[Any, list[Any]], Any]
"""``(inputs (B, L) int array, batched cache) -> logits (B, L, V)``."""


@dataclass(frozen=True)
class Stepper:
    """One model as the lockstep steps it: the mlx module, its EOS ids, how to decode ids to
    text, and its forward pass (the module called with its cache; a test may perturb it)."""

    model: Any
    eos_ids: frozenset[int]
    decode: Callable[[list[int]], str]
    forward: Forward | None = None

    def __call__(self, inputs: Any, cache: list[Any]) -> Any:
        if self.forward is not None:
            return self.forward(inputs, cache)
        return self.model(inputs, cache=cache)


@dataclass
class _Sequence:
    """One generation in progress: tokens and chosen logprobs (float32 values)."""

    tokens: list[int] = field(default_factory=list)
    chosen: list[float] = field(default_factory=list)
    finish: str | None = None


@dataclass
class _Accumulated:
    """Per position of one prompt x test model: what :class:`PositionStats` holds, and each
    row's logsumexp (for the normalisation and non-finite problems)."""

    kl: list[float] = field(default_factory=list)
    same_top: list[bool] = field(default_factory=list)
    delta_p: list[float] = field(default_factory=list)
    lse_base: list[float] = field(default_factory=list)
    lse_test: list[float] = field(default_factory=list)
    forced: list[ForcedArgmax] = field(default_factory=list)
    """Each step's :class:`~..metrics.forced.ForcedArgmax` of this prompt (one position)."""

    def stats(self, vocab: int) -> PositionStats:
        """The statistics with their problems, in :func:`position_stats`'s order: the
        baseline's rows, the test's rows, then non-finite ``KL_t``."""
        tol = logsumexp_tolerance(vocab)
        kl = np.array(self.kl, dtype=np.float64)
        problems = [
            *row_faults("baseline logprobs", self.lse_base, tol),
            *row_faults("test logprobs", self.lse_test, tol),
        ]
        kl_problem = check_values("KL", kl)
        if kl_problem is not None:
            problems.append(kl_problem)
        return ForcedStats(
            kl=kl,
            same_top=np.array(self.same_top, dtype=np.bool_),
            delta_p=np.array(self.delta_p, dtype=np.float64),
            problems=tuple(problems),
            forced=ForcedArgmax.concatenated(self.forced),
        )


@dataclass(frozen=True)
class LockstepResult:
    """Per prompt (in the order given): the baseline's generation; per test model (in the
    order given) its generations and its statistics over the baseline's continuation."""

    baseline: list[Generation]
    tests: list[list[Generation]]
    stats: list[list[PositionStats]]
    batch_size: int
    """How many prompts shared each forward pass (1: one at a time)."""


def accumulate_step(
    acc: Sequence[_Accumulated], base_rows: np.ndarray, test_rows: np.ndarray, chosen: list[int]
) -> None:
    """Add one step's positions (row ``i`` belongs to ``acc[i]``): ``KL_t``, same top and
    delta-p exactly as :func:`position_stats` computes them from these float32 rows, each
    row's float64 logsumexp (:func:`row_logsumexp`), and the test row's most likely token
    with both margins (:func:`~..metrics.forced.forced_full`): what a comparison reads at
    and after the first divergence, with no scoring pass of its own."""
    step = position_stats(base_rows, test_rows, chosen, row_tol=math.inf)
    lse_b, lse_t = row_logsumexp(base_rows), row_logsumexp(test_rows)
    forced = forced_full(base_rows, test_rows, chosen)
    for i, a in enumerate(acc):
        a.forced.append(
            ForcedArgmax(
                [forced.chosen[i]],
                [forced.test_top[i]],
                [forced.base_margin[i]],
                [forced.test_margin[i]],
                [forced.exact[i]],
            )
        )
        a.kl.append(float(step.kl[i]))
        a.same_top.append(bool(step.same_top[i]))
        a.delta_p.append(float(step.delta_p[i]))
        a.lse_base.append(float(lse_b[i]))
        a.lse_test.append(float(lse_t[i]))


Arrays = list[Any]
"""mlx arrays (or nested lists of them) for one ``mx.eval``."""


@dataclass(frozen=True)
class _Step:
    """One forward pass of a batch, built but not yet evaluated: the greedy tokens, their
    logprobs and (when asked) the float32 log-softmax rows."""

    tokens: Any
    chosen: Any
    rows: Any | None

    def arrays(self) -> Arrays:
        return [a for a in (self.tokens, self.chosen, self.rows) if a is not None]

    def collect(self) -> tuple[list[int], list[float], np.ndarray | None]:
        """The evaluated step: ids, chosen logprobs and the rows as a numpy ``(B, V)`` array."""
        ids: list[int] = self.tokens.tolist()
        values: list[float] = self.chosen.tolist()
        return ids, values, np.array(self.rows) if self.rows is not None else None


class _Batch:
    """One model's batched KV cache over the sequences still running."""

    def __init__(self, stepper: Stepper, cache: list[Any]) -> None:
        self.stepper = stepper
        self.cache = cache

    @classmethod
    def prefill(
        cls, stepper: Stepper, prefixes: list[list[int]]
    ) -> Generator[Arrays, None, _Batch]:
        """Every prefix in the cache (right-padded, then left-padded as ``BatchGenerator``
        does; nothing to do for empty prefixes), yielding what to evaluate after each chunk
        of :data:`PREFILL_STEP` tokens."""
        import mlx.core as mx
        from mlx_lm.generate import _merge_caches
        from mlx_lm.models.cache import make_prompt_cache

        cache = _merge_caches([make_prompt_cache(stepper.model) for _ in prefixes])
        lengths = [len(p) for p in prefixes]
        longest = max(lengths)
        if longest == 0:
            return cls(stepper, cache)
        padding = [longest - n for n in lengths]
        if max(padding) > 0:
            for c in cache:
                c.prepare(lengths=lengths, right_padding=padding)
        tokens = mx.array([p + [0] * (longest - len(p)) for p in prefixes])
        while tokens.shape[1] > 0:
            stepper(tokens[:, :PREFILL_STEP], cache)
            yield [c.state for c in cache]
            tokens = tokens[:, PREFILL_STEP:]
        if max(padding) > 0:
            for c in cache:
                c.finalize()
            yield [c.state for c in cache]
        return cls(stepper, cache)

    def launch(self, inputs: list[int], rows: bool = True) -> _Step:
        """Feed one token per sequence (built, not evaluated): the greedy tokens (argmax of
        the log-softmax in the model's dtype, as ``generate_step``), their logprobs, and
        (``rows``) the float32 log-softmax rows."""
        import mlx.core as mx

        logits = self.stepper(mx.array(inputs)[:, None], self.cache)[:, -1, :]
        native = logits - mx.logsumexp(logits, axis=-1, keepdims=True)
        tokens = mx.argmax(native, axis=-1)
        chosen = mx.take_along_axis(native, tokens[:, None], axis=-1)[:, 0].astype(mx.float32)
        if not rows:
            return _Step(tokens, chosen, None)
        if logits.dtype == mx.float32:  # the same expression: no second log-softmax
            return _Step(tokens, chosen, native)
        logits32 = logits.astype(mx.float32)
        return _Step(tokens, chosen, logits32 - mx.logsumexp(logits32, axis=-1, keepdims=True))

    def filter(self, keep: list[int]) -> None:
        for c in self.cache:
            c.filter(keep)

    def extract(self, row: int) -> list[Any]:
        """A copy of one sequence's cache (mlx arrays are values: later steps leave it)."""
        return [c.extract(row) for c in self.cache]


def _finished(seq: _Sequence, eos: frozenset[int], max_tokens: int) -> bool:
    if seq.tokens[-1] in eos:
        seq.finish = "stop"
    elif len(seq.tokens) >= max_tokens:
        seq.finish = "length"
    return seq.finish is not None


def _generation(stepper: Stepper, seq: _Sequence, prompt_tokens: int, batch: int) -> Generation:
    finish = seq.finish or "length"
    text_ids = seq.tokens[:-1] if finish == "stop" else seq.tokens
    return Generation(
        text=stepper.decode(text_ids),
        token_ids=list(seq.tokens),
        finish_reason=finish,
        chosen_logprobs=list(seq.chosen),
        prompt_tokens=prompt_tokens,
        batched=batch,
    )


def greedy(stepper: Stepper, prompts: list[list[int]], max_tokens: list[int]) -> list[Generation]:
    """Greedy generations of ``prompts`` in one batch (the lockstep without test models)."""
    return lockstep(stepper, [], prompts, max_tokens).baseline


def lockstep(
    baseline: Stepper,
    tests: list[Stepper],
    prompts: list[list[int]],
    max_tokens: list[int],
) -> LockstepResult:
    """Step ``prompts`` (non-empty token ids, each with its ``max_tokens`` >= 1) through the
    baseline and ``tests`` together, in one batch (see the module docstring)."""
    (result,) = lockstep_groups(baseline, tests, [(prompts, max_tokens)])
    return result


def lockstep_groups(
    baseline: Stepper,
    tests: list[Stepper],
    groups: Sequence[tuple[list[list[int]], list[int]]],
    parallel: int = 1,
) -> list[LockstepResult]:
    """Step each group ``(prompts, max_tokens)`` as one batch (:func:`lockstep`), up to
    ``parallel`` groups at a time: each running group on its own mlx stream, and the
    forward passes of all running groups evaluated by one ``mx.eval``, which runs each
    stream on its own thread (on mlx's CPU device, one core per stream). With ``parallel``
    = 1 every group runs on the default stream, one after the other.

    A group's numbers do not depend on the other groups: its arrays are its own and every
    kernel is the one a lone group runs. Results are in the order of ``groups``."""
    import mlx.core as mx

    results: list[LockstepResult | None] = [None] * len(groups)
    free = _streams(min(parallel, len(groups))) if parallel > 1 else [None]
    waiting = list(enumerate(groups))
    running: list[tuple[int, Generator[Arrays, None, LockstepResult], Any, Arrays]] = []

    def advance(j: int, run: Generator[Arrays, None, LockstepResult], stream: Any) -> None:
        """Resume group ``j`` on its stream up to its next evaluation (or its end)."""
        try:
            with mx.stream(stream) if stream is not None else contextlib.nullcontext():
                pending = next(run)
        except StopIteration as end:
            results[j] = end.value
            free.append(stream)
        else:
            running.append((j, run, stream, pending))

    while waiting or running:
        while waiting and free:
            j, (prompts, budgets) = waiting.pop(0)
            advance(j, _stepping(baseline, tests, prompts, budgets), free.pop())
        mx.eval([pending for *_, pending in running])
        resumed, running[:] = list(running), []
        for j, run, stream, _ in resumed:
            advance(j, run, stream)
    done = [r for r in results if r is not None]
    assert len(done) == len(groups), "every group runs to its end"
    return done


_STREAM_POOLS: dict[int, list[Any]] = {}
"""Extra mlx streams (each owns a thread) per calling thread (mlx streams belong to the
thread that made them): made once, reused by every call."""


def _streams(count: int) -> list[Any]:
    """``count`` mlx streams on the default device, other than the default stream."""
    import mlx.core as mx

    pool = _STREAM_POOLS.setdefault(threading.get_ident(), [])
    while len(pool) < count:
        pool.append(mx.new_stream(mx.default_device()))
    return list(pool[:count])


def cpu_parallelism() -> int:
    """How many groups :func:`lockstep_groups` should run at once here: the cores this
    process may use when mlx computes on the CPU (one stream per core), else 1 (a GPU is
    one device, already parallel within each pass)."""
    import mlx.core as mx

    if mx.default_device() != mx.cpu:
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def _stepping(
    baseline: Stepper,
    tests: list[Stepper],
    prompts: list[list[int]],
    max_tokens: list[int],
) -> Generator[Arrays, None, LockstepResult]:
    """One group's lockstep, yielding what to evaluate before it goes on: the prefills,
    then at every step the forward passes of the baseline and of every test model, which
    all take tokens known before the step (the baseline's last token, or a tail's own). A
    test model's batch holds its teacher-forced rows (one per prompt the baseline still
    generates, in the baseline's order) and, appended, its own continuations from their
    first divergence (tails): both kinds share each of its forward passes."""
    if not prompts:
        return LockstepResult([], [[] for _ in tests], [[] for _ in tests], 0)
    if any(not p for p in prompts) or any(m < 1 for m in max_tokens):
        raise ValueError("lockstep needs non-empty prompts and max_tokens >= 1")
    n = len(prompts)
    prefixes = [list(p[:-1]) for p in prompts]
    base_batch = yield from _Batch.prefill(baseline, prefixes)
    test_batches = []
    for stepper in tests:
        test_batches.append((yield from _Batch.prefill(stepper, prefixes)))
    base_seqs = [_Sequence() for _ in prompts]
    test_seqs = [[_Sequence() for _ in prompts] for _ in tests]
    acc = [[_Accumulated() for _ in prompts] for _ in tests]
    roles: list[list[tuple[bool, int]]] = [[(True, i) for i in range(n)] for _ in tests]
    """Per test model, its batch's rows: (teacher-forced?, prompt index)."""
    diverged: list[set[int]] = [set() for _ in tests]
    live = list(range(n))
    feed = {i: p[-1] for i, p in enumerate(prompts)}
    vocab = 0
    while live or any(roles):
        base_step = base_batch.launch([feed[i] for i in live], bool(tests)) if live else None
        test_steps = [
            batch.launch(
                [feed[i] if forced else test_seqs[k][i].tokens[-1] for forced, i in roles[k]],
                any(forced for forced, _ in roles[k]),
            )
            if roles[k]
            else None
            for k, batch in enumerate(test_batches)
        ]
        yield [a for step in (base_step, *test_steps) if step is not None for a in step.arrays()]
        base_rows: Any = None
        base_tokens: list[int] = []
        done: set[int] = set()
        if base_step is not None:
            base_tokens, base_chosen, base_rows = base_step.collect()
            for row, i in enumerate(live):
                seq = base_seqs[i]
                seq.tokens.append(base_tokens[row])
                seq.chosen.append(base_chosen[row])
                if _finished(seq, baseline.eos_ids, max_tokens[i]):
                    done.add(i)
        for k, batch in enumerate(test_batches):
            test_step = test_steps[k]
            if test_step is None:
                continue
            teacher = [row for row, (forced, _) in enumerate(roles[k]) if forced]
            tokens, chosen, rows = test_step.collect()
            if teacher:
                assert rows is not None
                vocab = rows.shape[-1]
                accumulate_step([acc[k][i] for i in live], base_rows, rows[teacher], base_tokens)
            keep: list[int] = []
            tails: list[tuple[int, list[Any]]] = []
            for row, (forced, i) in enumerate(roles[k]):
                seq = test_seqs[k][i]
                if forced and i in diverged[k]:  # its own continuation is a tail row
                    if i not in done:
                        keep.append(row)
                    continue
                seq.tokens.append(tokens[row])
                seq.chosen.append(chosen[row])
                if forced and tokens[row] == base_seqs[i].tokens[-1]:
                    if i in done:
                        seq.finish = base_seqs[i].finish
                    else:
                        keep.append(row)
                    continue
                finished = _finished(seq, tests[k].eos_ids, max_tokens[i])
                if forced:  # the first divergence: its continuation goes on as a tail
                    diverged[k].add(i)
                    if not finished:
                        tails.append((i, batch.extract(row)))
                    if i not in done:
                        keep.append(row)
                elif not finished:
                    keep.append(row)
            roles[k] = _regroup(batch, roles[k], keep, tails)
        if done:
            if any(i not in done for i in live):
                base_batch.filter([row for row, i in enumerate(live) if i not in done])
            live = [i for i in live if i not in done]
        for i in live:
            feed[i] = base_seqs[i].tokens[-1]
    lengths = [len(p) for p in prompts]
    return LockstepResult(
        baseline=[_generation(baseline, s, m, n) for s, m in zip(base_seqs, lengths, strict=True)],
        tests=[
            [_generation(stepper, s, m, n) for s, m in zip(seqs, lengths, strict=True)]
            for stepper, seqs in zip(tests, test_seqs, strict=True)
        ],
        stats=[[a.stats(vocab) for a in per_test] for per_test in acc],
        batch_size=n,
    )


def _regroup(
    batch: _Batch,
    roles: list[tuple[bool, int]],
    keep: list[int],
    tails: list[tuple[int, list[Any]]],
) -> list[tuple[bool, int]]:
    """Keep the rows ``keep`` of ``batch`` and append the new tails (their caches copied out
    at their first divergence); returns the batch's new roles."""
    from mlx_lm.generate import _merge_caches

    if len(keep) < len(roles) and keep:
        batch.filter(keep)
    if tails:
        added = _merge_caches([cache for _, cache in tails])
        if keep:
            for mine, other in zip(batch.cache, added, strict=True):
                mine.extend(other)
        else:
            batch.cache = added
    return [roles[row] for row in keep] + [(False, i) for i, _ in tails]


def probe(
    stepper: Stepper,
    prompts: list[list[int]],
    max_tokens: int,
    tol: float = 0.0,
    parallel: int = 1,
) -> str:
    """Whether batching changes ``stepper``'s greedy generations: ``prompts`` generated one
    at a time and together in one batch must give identical tokens and chosen logprobs
    within ``tol`` (0: bit-identical; a NaN is never within). The batch and the lone
    prompts are stepped ``parallel`` at a time (:func:`lockstep_groups`). Returns what
    differs (the first prompt that does), or "" when nothing does."""
    budgets = [max_tokens] * len(prompts)
    groups = [(prompts, budgets), *(([p], [max_tokens]) for p in prompts)]
    batch, *lone = lockstep_groups(stepper, [], groups, parallel)
    together = batch.baseline
    for j, one in enumerate(lone):
        (alone,) = one.baseline
        batched = together[j]
        if alone.token_ids != batched.token_ids:
            return f"probe prompt {j}: batched token ids differ from the prompt alone"
        a, b = alone.chosen_logprobs or [], batched.chosen_logprobs or []
        drift = strict_max([abs(x - y) for x, y in zip(a, b, strict=True)]) or 0.0
        if not drift <= tol:
            return (
                f"probe prompt {j}: batched logprobs differ from the prompt alone by "
                f"{drift:.3g} (tolerance {tol:g})"
            )
    return ""
