"""What the harness makes of one faulty run of a kind: did the kind see the fault?

:func:`judge_fault` runs the kind with a fault and sorts the outcome into one verdict:

- ``not-applied``: the fault changed nothing the request answered (a duplicate of an equal
  answer, a truncation past the end): nothing to see;
- ``unread``: a fault of the answer's content (not an HTTP error, not a warm reference) on a
  request whose answer the kind never reads: changing its token (the probe,
  :func:`observed`) changes nothing any item or the aggregate says. Such a request sets the
  engine up for another (a prompt that primes the cache, a companion around a batch's
  needle); its content is not what the kind judges;
- ``blind``: the kind's profile declares it cannot see this fault (with the reason);
- ``caught``: an item or the aggregate failed (for an HTTP fault: naming the server's
  status);
- ``missed``: everything passed under a fault the kind must see (invariant 2 broken);
- ``unnamed``: an HTTP fault failed the run without the server's status anywhere in what the
  failing items say.

Beside the verdict, :func:`passing_skips` lists the items that pass saying ``unsupported``,
``not exercised`` or ``unknown`` more often than on the faithful engine (invariant 3), and
:meth:`~.run.RunResult.crashes` the items that crashed instead of giving a verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

from pytest_infercheck.checks.framework.harness import HarnessProfile
from pytest_infercheck.checks.registry import kind_named

from .faults import STATUS, Fault, Request
from .run import RunResult, Setup, run, setup

MISSING = (
    "{kind}: no harness profile: add `harness=HarnessProfile(entry=..., blind=...)` to its "
    "SpecFacet (checks/framework/kind.py: a minimal check entry on {{target}} with its gates "
    "written, and the faults it cannot see with the reason)"
)


class NoProfile(LookupError):
    """A registered kind with no harness profile (the message says what to add)."""


def profile(name: str) -> HarnessProfile:
    kind = kind_named(name)
    assert kind is not None, name
    found = kind.spec.harness
    if found is None:
        raise NoProfile(MISSING.format(kind=name))
    return found


@cache
def setup_for(name: str, shape: str) -> Setup:
    kind = kind_named(name)
    assert kind is not None, name
    return setup(kind, profile(name), shape)


@cache
def faithful(name: str, shape: str, seed: int) -> RunResult:
    """The kind's run on the faithful engine (memoised: it is deterministic)."""
    return run(setup_for(name, shape), None, seed)


@cache
def observed(name: str, shape: str, seed: int, request: Request) -> bool:
    """Whether the kind reads ``request``'s answer: a changed token there changes what an
    item or the aggregate says, or fails the run. True when no token can be changed (nothing
    to probe: the fault is judged)."""
    if request.content == 0:
        return True
    probe = run(setup_for(name, shape), Fault("changed-token", request), seed)
    if not probe.applied:
        return True
    return probe.failed or probe.said() != faithful(name, shape, seed).said()


def _key(request: Request) -> Request:
    """``request`` as the faithful log has it (what a probe aims at)."""
    return Request(request.backend, request.path, request.key, request.occurrence)


SKIP_WORDS = re.compile(r"unsupported|not exercised|\bunknown\b", re.IGNORECASE)


def passing_skips(base: RunResult, result: RunResult) -> list[str]:
    """The items of ``result`` that pass saying ``unsupported`` / ``not exercised`` /
    ``unknown`` more often than in ``base`` (the faithful run)."""
    before = {i.name: len(SKIP_WORDS.findall(i.words())) for i in [*base.items, base.aggregate]}
    out = []
    for item in [*result.items, result.aggregate]:
        if item.failed:
            continue
        said = len(SKIP_WORDS.findall(item.words()))
        if said > before.get(item.name, 0):
            out.append(
                f"{item.name} passes saying unsupported / not exercised / unknown {said} "
                f"times (faithful: {before.get(item.name, 0)}):\n{item.words()[:1500]}"
            )
    return out


@dataclass
class Judgement:
    """One faulty run, judged (see the module docstring)."""

    fault: Fault
    shape: str
    result: RunResult
    verdict: str
    why: str = ""
    skips: list[str] = field(default_factory=list)

    def report(self) -> str:
        head = f"{self.result.setup.kind.name} ({self.shape}): {self.verdict}: "
        lines = [head + self.fault.describe(), f"  applied: {self.result.applied[:3]}"]
        if self.why:
            lines.append(f"  {self.why}")
        lines += [f"  {line}" for line in self.result.failures()[:6]]
        return "\n".join(lines)


def judge_fault(name: str, shape: str, seed: int, fault: Fault) -> Judgement:
    """Run ``name`` on ``shape`` with ``fault`` and judge it (see the module docstring)."""
    base = faithful(name, shape, seed)
    result = run(setup_for(name, shape), fault, seed)

    def judged(verdict: str, why: str = "") -> Judgement:
        return Judgement(fault, shape, result, verdict, why, passing_skips(base, result))

    if not result.applied:
        return judged("not-applied")
    content = fault.kind not in STATUS and fault.kind != "warm-reference"
    logged = {_key(r): r for r in base.log}
    changed = [logged.get(_key(r), r) for r in result.changed]
    if content and not any(observed(name, shape, seed, r) for r in changed):
        return judged("unread", "no item reads this answer (a changed token there is unseen)")
    blind = profile(name).blind_to(fault.kind, fault.request.path, fault.every, shape)
    if blind is not None:
        return judged("blind", blind)
    if not result.failed:
        return judged("missed", "every item and the aggregate passed")
    if fault.kind in STATUS:
        said = "\n".join(i.words() for i in [*result.items, result.aggregate] if i.failed)
        if f"HTTP {fault.status}" not in said:
            return judged("unnamed", f"no failing item names HTTP {fault.status}")
    return judged("caught")
