"""An item's verdict from hand-made evidence, as the framework makes it (the kind's pure
judge, then the gates, the conduct rules and the waivers): for the unit tests of
determinism, batch-invariance and stress."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pytest_infercheck.checks.framework.outcome import Outcome
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.config import CheckSpec
from pytest_infercheck.metrics.past_tie import Rescored, ScoredToken


def thresholds(kind: str, **written: object) -> Any:
    """The thresholds of a ``kind`` check entry with ``written`` beside its key."""
    return CheckSpec.model_validate({kind: "m", **written}).kind_thresholds()


def outcome(kind: str, evidence: Any, written: Any, role: str = "prompt") -> Outcome:
    """The item's outcome (its violations, text, record) under ``written`` thresholds."""
    found = kind_named(kind)
    assert found is not None
    judged = found.judge(ItemPlan("p", role, "p"), evidence, written)
    return item_outcome(found, judged, evidence, written)


def violations(kind: str, evidence: Any, written: Any, role: str = "prompt") -> list[str]:
    return outcome(kind, evidence, written, role).violations


def rescored(ids: Sequence[int], margins: Sequence[float] = ()) -> Rescored:
    """An output's tokens teacher-forced: at position ``s`` its token is ``margins[s]`` nats
    below the engine's best (0 when not given: the engine's own choice, token 99 else)."""
    tokens = []
    for s, token in enumerate(ids):
        m = margins[s] if s < len(margins) else 0.0
        tokens.append(ScoredToken(token, -0.5 - m, -0.5, token if m == 0 else 99))
    return Rescored(tokens)
