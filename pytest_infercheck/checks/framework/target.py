"""What single-target kinds share (determinism, stress, parity, ...): their node-id label,
their aggregate's context, and a gatherer base that resolves, renders and fills in
conversations for the one target."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ...backends.base import BackendError
from ...conversation import Conversation, has_generated
from ...specs import SERVER_KINDS

if TYPE_CHECKING:
    from ...backends.base import GenerationParams, PromptInput
    from ...generation_cache import ResolvedTarget
    from ...matrix import CheckSpec, LoadedMatrix
    from ...suites import Prompt
    from .context import RunContext


@dataclass
class TargetContext:
    """The context of a single-target kind's aggregate: the target's label and its engine's
    identity by target label."""

    target: str
    engines: dict[str, dict[str, Any]]


def target_label(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str:
    """A single-target check's name in node ids: its model, with the backend when the matrix
    has several (``stress(q4.llama)``)."""
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    several = len(loaded.matrix.backends) > 1
    return f"{target.model}.{target.backend}" if several else target.model


def no_logprobs_reason(loaded: LoadedMatrix, check: CheckSpec, index: int) -> str | None:
    """Why the check's target returns no logprobs, known from the matrix alone (its backend
    entry says ``logprobs: false``, or its kind ignores logprob requests); None otherwise."""
    side = check.baseline_side(index)
    target = loaded.target(side.ref, side.loc)
    backend = loaded.matrix.backends.get(target.backend)
    if backend is None:
        return None
    if backend.kind == "vllm-mlx":
        return f"backend {target.backend!r} (vllm-mlx) returns no logprobs"
    if not getattr(backend, "logprobs", True):
        return f"backend {target.backend!r} has logprobs: false"
    return None


S = TypeVar("S")


class TargetGatherer(Generic[S]):
    """The base of a single-target kind's gather facet: ``self.run`` (the
    :class:`~.run.RunContext`), ``self.spec`` (the kind's options, typed ``S``), the target
    and what every such kind does with it. Subclasses define ``gather(plans)``."""

    def __init__(self, run: RunContext) -> None:
        self.run = run

    @property
    def spec(self) -> S:
        spec: S = self.run.spec
        return spec

    @property
    def target(self) -> ResolvedTarget:
        return self.run.resolve(self.run.check.baseline_side(self.run.index))

    def context(self) -> Any:
        """The target and its engine (:class:`TargetContext`)."""
        target = self.target
        return TargetContext(target.label, {target.label: target.backend.identity()})

    def params(self, prompt: Prompt) -> GenerationParams:
        return self.run.params(prompt)

    def render(self, prompt: Prompt) -> PromptInput:
        """``prompt`` as the target receives it; a conversation with ``generate`` turns
        filled in by the target itself (its final turn's input)."""
        if has_generated(prompt):
            return self.conversation(prompt).final
        return self.run.cache.render(self.target, prompt, self.run.settings.thinking)

    def conversation(self, prompt: Prompt) -> Conversation:
        """``prompt`` filled in by the target under the item's params (see
        :meth:`~pytest_infercheck.generation_cache.GenerationCache.conversation`)."""
        return self.run.cache.conversation(
            self.target, prompt, self.run.settings.thinking, self.params(prompt)
        )

    def served_target(self) -> ResolvedTarget:
        """The run's target, which must be served over HTTP (checked before anything loads):
        an in-process target raises ``BackendError`` naming it."""
        run = self.run
        side = run.check.baseline_side(run.index)
        target = run.loaded.target(side.ref, side.loc)
        kind = run.loaded.matrix.backends[target.backend].kind
        if kind not in SERVER_KINDS:
            raise BackendError(
                f"{run.check.kind} needs a server backend ({', '.join(SERVER_KINDS)}): "
                f"{target.label} runs in-process ({kind})"
            )
        return self.target


def side_label(ref: str, reference: str) -> str:
    """An other side's label in item ids: its backend when it has the reference's model,
    its model when it has the reference's backend, else ``model.backend``."""
    model, _, backend = ref.partition("@")
    ref_model, _, ref_backend = reference.partition("@")
    if model == ref_model and backend:
        return backend
    if backend == ref_backend or not backend:
        return model
    return f"{model}.{backend}"
