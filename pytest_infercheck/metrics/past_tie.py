"""What follows a near-tie: an output judged past the token where it left its reference.

Two greedy outputs of one engine (determinism's runs, a prompt alone and in a batch, a
reference and an output under load) that part at a near-tie (:mod:`.ties`) saw the same
prefix there and chose tokens within ``tie_margin`` of each other: floating-point reordering
can do that. What follows the near-tie is a continuation of another prefix, and is judged
by teacher forcing: the engine scores ``prompt + output`` and, at every position ``s`` after
the near-tie ``t``, the **margin**

    ``m_s = max_v log p_s(v) - log p_s(x_s)``

says how far the output's token ``x_s`` is from the engine's own greedy choice after that
very prefix (0 when it is the argmax; from a full-vocabulary row, or from a top-k row with
the given token's own log-probability, which is exact: the top-k holds the maximum). A
position with ``m_s > tie_margin`` is a **decisive disagreement**: the output went where the
engine, given the same tokens, would not (a fault that shows only after the fork: a KV
block boundary, a long position, an output that degenerates). A non-finite margin judges
nothing. Both sides of the divergence are judged past ``t``: the reference's continuation and
the output's.

An output that is not scored (the engine cannot score teacher-forced, the prompt's token ids
are unknown, the scoring request failed) is not judged past its near-tie
(:class:`Rescored` with ``unscored``): a waiver that rests on the judgement is not applied.
Pure functions; numpy rows are read through ``float``/``argmax`` only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import OMIT_WHEN_EMPTY, Measured


@dataclass
class ScoredToken:
    """One teacher-forced position of an output: its own token there and that token's
    log-probability, and the largest log-probability of the row with its token id."""

    token: int
    chosen: Measured
    best: Measured
    best_token: int


@dataclass
class Rescored:
    """An output's own tokens teacher-forced on its engine (``tokens``, one per generated
    token), or why it was not (``unscored``)."""

    tokens: list[ScoredToken] | None = None
    unscored: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)


def rescored_full(rows: Any, ids: Sequence[int]) -> Rescored:
    """From full-vocabulary rows ``(len(ids), V)``: row ``i`` predicts ``ids[i]``."""
    tokens = []
    for i, token in enumerate(ids):
        row = rows[i]
        best = int(row.argmax())
        tokens.append(ScoredToken(int(token), float(row[token]), float(row[best]), best))
    return Rescored(tokens)


def rescored_top_k(rows: Sequence[Any], ids: Sequence[int]) -> Rescored:
    """From top-k rows (``chosen``: the given token's log-probability, ``top``: the top k by
    id): the best is the largest of the top k and the chosen one."""
    tokens = []
    for row, token in zip(rows, ids, strict=False):
        top = dict(row.top)
        top.setdefault(token, row.chosen)
        best = max(top, key=lambda k: top[k])
        tokens.append(ScoredToken(int(token), float(row.chosen), float(top[best]), int(best)))
    if len(tokens) != len(ids):
        return Rescored(unscored=f"the engine scored {len(tokens)} of {len(ids)} tokens")
    return Rescored(tokens)


@dataclass
class AfterTie:
    """The judgement of what follows a near-tie (see the module docstring): ``judged``
    (both sides were scored past it); ``decisive_at`` the first position after it where a
    side disagrees decisively with its engine (``side``, ``margin`` in nats, the engine's
    ``engine_token`` there against the side's ``token``); ``why`` in words."""

    judged: bool
    why: str
    decisive_at: int | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    side: str | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    margin: float | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    token: int | None = field(default=None, metadata=OMIT_WHEN_EMPTY)
    engine_token: int | None = field(default=None, metadata=OMIT_WHEN_EMPTY)

    @property
    def clean(self) -> bool:
        """Judged, with no decisive disagreement after the near-tie."""
        return self.judged and self.decisive_at is None


def judge_after_tie(
    sides: Sequence[tuple[str, Rescored | None]], tie_at: int, tie_margin: float
) -> AfterTie:
    """Both sides (``(name, rescored)``, the reference first) judged at every position after
    ``tie_at`` (see the module docstring): the first decisive disagreement, or a clean
    judgement; not judged when a side was not scored or a margin is not finite."""
    for name, rescored in sides:
        if rescored is None or rescored.tokens is None:
            why = "not scored" if rescored is None else rescored.unscored
            return AfterTie(False, f"{name} not judged past the near-tie at token {tie_at}: {why}")
    compared = 0
    for name, rescored in sides:
        assert rescored is not None and rescored.tokens is not None
        for s in range(tie_at + 1, len(rescored.tokens)):
            scored = rescored.tokens[s]
            margin = scored.best - scored.chosen
            if not math.isfinite(margin):
                return AfterTie(
                    False,
                    f"{name}'s teacher-forced score at token {s} is not finite "
                    f"(chosen {scored.chosen}, best {scored.best}): nothing judged past the "
                    f"near-tie at token {tie_at}",
                )
            compared += 1
            if margin > tie_margin:
                return AfterTie(
                    True,
                    f"after the near-tie at token {tie_at}, {name} disagrees decisively with "
                    f"its engine at token {s}: its token is {margin:.4g} nats below the "
                    f"engine's own choice there (teacher-forced; tie_margin {tie_margin:g})",
                    decisive_at=s,
                    side=name,
                    margin=margin,
                    token=scored.token,
                    engine_token=scored.best_token,
                )
    return AfterTie(
        True,
        f"judged past the near-tie at token {tie_at} by teacher forcing: {compared} later "
        f"tokens, each within tie_margin {tie_margin:g} of its engine's own choice",
    )
