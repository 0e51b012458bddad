"""cache-pollution's evidence: what the gather facet collected for one hostile request (the
reference outputs before any hostile request, the server's answer to this one, whether it
was alive after it, the reference outputs after it) and how the gathering went. No gates
read it: it has no measures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ...backends.base import Generation
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue

Outputs = list[tuple[str, Generation]]
"""``(prompt id, output)`` of the reference prompts that answered, in suite order."""


@dataclass
class HostileEvidence:
    """One hostile item as gathered."""

    target: str
    hostile: str
    response: str
    """What the server answered to the hostile request (its answer, whatever it is), or why
    it was not sent."""
    alive: bool
    prompts: int
    """How many reference prompts the suite has."""
    before: Outputs
    """The reference outputs before any hostile request."""
    after: Outputs | None
    """The reference outputs after this request; None: not generated (the server was not
    alive, or the references before any hostile request failed)."""
    failure: str | None = None
    """The reference requests that failed around this request (their messages; each is a
    :class:`~pytest_infercheck.verdict.conduct.RequestFailure` of :attr:`conduct`)."""
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> Mapping[str, MeasureValue]:
        return {}
