"""What the gather facets of single-target kinds share (determinism, batch-invariance,
stress): the check's one target, a prompt rendered as the target receives it, and the
aggregate's context (the target's label and its engine)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..conversation import has_generated
from ..verdict.conduct import RequestFailure
from .protocol import TargetContext

if TYPE_CHECKING:
    from ..backends import PromptInput
    from ..generation_cache import ResolvedTarget
    from ..suites import Prompt
    from .framework.run import RunContext


def target_of(run: RunContext) -> ResolvedTarget:
    """The live target of the check (its ``target``)."""
    return run.resolve(run.check.baseline_side(run.index))


def render(run: RunContext, target: ResolvedTarget, prompt: Prompt) -> PromptInput:
    """``prompt`` as ``target`` receives it; a conversation with ``generate`` turns filled
    in by the target itself under the item's params (its final turn's input)."""
    if has_generated(prompt):
        conversation = run.cache.conversation(
            target, prompt, run.settings.thinking, run.params(prompt)
        )
        return conversation.final
    return run.cache.render(target, prompt, run.settings.thinking)


def target_context(target: ResolvedTarget) -> TargetContext:
    """The aggregate's context: the target's label and its engine's identity."""
    return TargetContext(target.label, {target.label: target.backend.identity()})


def status_of(error: BaseException) -> int | None:
    """The HTTP status of a failed request, None when it had none."""
    status = getattr(error, "status", None)
    return status if isinstance(status, int) else None


def request_failure(side: str, what: str, message: str, status: int | None) -> RequestFailure:
    """A failed request as the framework's rule takes it (it fails the item with the
    server's message); the status is left to the message when the message names it
    (``backend 'llama': POST /completion -> HTTP 400: ...``)."""
    if status is not None and f"HTTP {status}" in message:
        status = None
    return RequestFailure(side, what, message, status)


def failure_of(side: str, what: str, error: BaseException) -> RequestFailure:
    """:func:`request_failure` of an exception."""
    return request_failure(side, what, str(error), status_of(error))
