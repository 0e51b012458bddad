"""Teacher-forced scoring of outputs past a near-tie: the I/O of the kinds that compare a
target with itself (determinism, batch-invariance, stress) for ``fail_on: decisive``.

A waiver of a near-tie divergence applies only to what was judged
(:mod:`~pytest_infercheck.verdict.waiver`): both outputs that part there are scored on the
target, prompt + output, and judged past the near-tie by
:func:`~pytest_infercheck.metrics.past_tie.judge_after_tie`. This module only asks: an engine
with full-vocabulary teacher forcing (``Capabilities.teacher_forcing``: mlx-lm, llama-server,
vLLM with full rows, SGLang) is scored by its full rows, one with top-k teacher forcing
(``teacher_forcing_top_k``: vLLM's ``prompt_logprobs``) by its top-k rows; any other is not
scored, and says so. Every job of a call is sent at once (the backend bounds what it has in
flight). A scoring request the target fails is a
:class:`~pytest_infercheck.verdict.conduct.RequestFailure` (it fails the item with the
server's message), never a quiet "not judged".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..backends.base import BackendError
from ..backends.capabilities import Scoring, TopKScoring
from ..metrics.past_tie import Rescored, rescored_full, rescored_top_k
from ..verdict.conduct import RequestFailure
from .framework.failures import request_failure
from .framework.requests import settle

if TYPE_CHECKING:
    from ..generation_cache import GenerationCache, ResolvedTarget


@dataclass(frozen=True)
class ScoreJob:
    """An output to score: its prompt's token ids and its own (None: unknown), and what it
    is in words (``run 2``, ``the batched output of trial 1``)."""

    prompt_ids: tuple[int, ...] | None
    ids: tuple[int, ...] | None
    what: str


def full_rows(backend: Any) -> bool:
    """Whether ``backend`` scores teacher-forced full rows in this configuration."""
    caps = getattr(backend, "capabilities", None)
    return bool(caps is not None and caps.teacher_forcing and isinstance(backend, Scoring))


def top_k_rows(backend: Any) -> bool:
    """Whether ``backend`` scores teacher-forced top-k rows in this configuration."""
    caps = getattr(backend, "capabilities", None)
    return bool(
        caps is not None and caps.teacher_forcing_top_k and isinstance(backend, TopKScoring)
    )


def cannot_score(backend: Any) -> str | None:
    """Why ``backend`` cannot score teacher-forced, or None when it can."""
    if full_rows(backend) or top_k_rows(backend):
        return None
    return f"backend {backend.name!r} ({backend.kind}) cannot score teacher-forced"


def rescore(
    cache: GenerationCache, target: ResolvedTarget, jobs: Sequence[ScoreJob]
) -> tuple[dict[ScoreJob, Rescored], list[RequestFailure]]:
    """Each job's :class:`Rescored` (one request per distinct prompt and output, all at
    once) and the scoring requests the target failed."""
    backend = target.backend
    out: dict[ScoreJob, Rescored] = {}
    why = cannot_score(backend)
    todo: list[ScoreJob] = []
    unique: dict[tuple[object, object], ScoreJob] = {}
    for job in jobs:
        key = (job.prompt_ids, job.ids)
        if key in unique:
            continue
        unique[key] = job
        if why is not None:
            out[job] = Rescored(unscored=why)
        elif job.prompt_ids is None or not job.prompt_ids:
            out[job] = Rescored(unscored="the prompt's token ids are unknown (no tokenizer)")
        elif job.ids is None:
            out[job] = Rescored(unscored=f"{job.what} has no token ids")
        elif not job.ids:
            out[job] = Rescored([])
        else:
            todo.append(job)
    full = bool(todo) and full_rows(backend)

    async def one(job: ScoreJob) -> Any:
        assert job.prompt_ids is not None and job.ids is not None
        if full and isinstance(backend, Scoring):
            return await backend.score(list(job.prompt_ids), list(job.ids))
        assert isinstance(backend, TopKScoring)
        return await backend.score_top_k(list(job.prompt_ids), list(job.ids))

    failures: list[RequestFailure] = []
    results = settle(cache, target, [one(job) for job in todo])
    for job, result in zip(todo, results, strict=True):
        if isinstance(result, BackendError):
            what = f"teacher-forced scoring of {job.what}"
            failures.append(request_failure(target.label, what, result))
            out[job] = Rescored(unscored=f"its scoring request failed: {result}")
        else:
            assert job.ids is not None
            out[job] = rescored_full(result, job.ids) if full else rescored_top_k(result, job.ids)
    for job in jobs:  # the same prompt and output asked again: its one scoring
        out[job] = out[unique[(job.prompt_ids, job.ids)]]
    return out, failures
