"""cache-pollution's gather facet: the reference prompts once, then each hostile request in
order, the server's health after it and the reference prompts again; it never judges.

The suite's prompts are generated once, one at a time, before any hostile request (the
reference "before"). For each item, in order, its hostile request is sent (see
:mod:`~pytest_infercheck.backends.hostile`): what the server answers (a 4xx, a 5xx, a closed
connection, a completion) is the request's answer, recorded, never a failure. Then the
server's health endpoint is asked, and, when it answers, the reference prompts are generated
again, one at a time. Later items see the earlier hostile requests too.

A reference request that fails (before any hostile request, or after one while the server is
alive) is a :class:`~pytest_infercheck.verdict.conduct.RequestFailure` with the server's
message, on every item it concerns: the item fails, it is never passed over. When the
references before any hostile request failed, no hostile request is sent.

Needs a server backend; an in-process (mlx-lm) target errors every item and the aggregate
with that message.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ...backends.base import BackendError
from ...verdict.conduct import Conduct, RequestFailure
from ..framework.failures import request_failure
from ..framework.plan import ItemPlan
from ..framework.target import TargetGatherer
from .evidence import HostileEvidence, Outputs
from .records import CachePollutionContext
from .spec import CachePollutionSpec

if TYPE_CHECKING:
    from ...generation_cache import ResolvedTarget

BEFORE = "the reference prompts before any hostile request"


class CachePollutionGather(TargetGatherer[CachePollutionSpec]):
    """The gather facet of one check x suite (see the module docstring); its target must
    be a server (:meth:`served_target`, checked before anything loads)."""

    def context(self) -> CachePollutionContext:
        target = self.served_target()
        return CachePollutionContext(
            target.label, len(self.run.suite.prompts), {target.label: target.backend.identity()}
        )

    def _references(
        self, target: ResolvedTarget, side: str
    ) -> tuple[Outputs, list[RequestFailure]]:
        """The suite's prompts generated now, one at a time, bypassing every cache; each
        one that fails is a :class:`RequestFailure` of ``side``."""
        outputs: Outputs = []
        failures = []
        for prompt in self.run.suite.prompts:
            try:
                rendered = self.render(prompt)
                work = target.backend.generate(rendered, self.run.params(prompt))
                outputs.append((prompt.id, self.run.cache.call(target, work)))
            except BackendError as exc:
                failures.append(request_failure(side, prompt.id, exc))
        return outputs, failures

    def gather(self, plans: Sequence[ItemPlan]) -> Mapping[str, HostileEvidence]:
        """Every item's evidence, its hostile requests sent in the order of ``plans``."""
        target = self.served_target()
        backend = target.backend
        before, lost = self._references(target, BEFORE)
        prompts = len(self.run.suite.prompts)
        out: dict[str, HostileEvidence] = {}
        for plan in plans:
            kind = plan.key
            conduct = Conduct(failures=list(lost))
            if lost:
                response = "not sent: the reference prompts failed before any hostile request"
            else:
                try:
                    response = self.run.cache.run(backend.send_hostile(kind))
                except BackendError as exc:
                    conduct.failures.append(
                        request_failure(f"the {kind} request", "sending it", exc)
                    )
                    response = f"not sent: {exc}"
            alive = self.run.cache.run(backend.alive())
            after: Outputs | None = None
            if alive and not lost:
                after, failed = self._references(
                    target, f"the reference prompts after the {kind} request"
                )
                conduct.failures += failed
            texts = [f.text() for f in conduct.failures]
            out[plan.full_name] = HostileEvidence(
                target.label,
                kind,
                response,
                alive,
                prompts,
                before,
                after,
                "; ".join(texts) or None,
                conduct,
            )
        return out
