"""What a teacher-forced comparison knows at every position besides KL: the test side's most
likely token and, where it is not the baseline's, both sides' margins.

Both sides are scored on the baseline's continuation C (the same prefix ``C[:t]`` at every
position ``t``). With ``c = C[t]`` the baseline's token and ``x = argmax_v log p_test(v)`` the
test side's most likely token there (ties: the lower id)::

    base_margin[t] = log p_base(c) - log p_base(x)
    test_margin[t] = log p_test(x) - log p_test(c)

Both are 0 where ``x == c`` (the sides agree); where they do not, they are the margins of
:mod:`.ties` at a disagreement of the two distributions (each side's own token against the
other's, under its own distribution), so the same label applies: ``near-tie`` within
``tie_margin``, else ``decisive``. A top-k row (a server's ``prompt_logprobs``) knows the
test side's most likely token and its chosen token's logprob exactly; a baseline top-k row
without ``x`` gives the lower bound ``log p_base(c) - min(top-k)`` (``exact`` False).

A lockstep run (:mod:`~pytest_infercheck.backends.mlx_lockstep`) accumulates these numbers
step by step from the rows it compares anyway (:class:`ForcedStats`), so the margins at the
first divergence, and the disagreements after it, need no scoring pass of their own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from .kl import PositionStats, top_one
from .ties import Margin

Row = Any
"""A full-vocabulary logprob row (a numpy row or list: ``row[id]``) or a top-k map ``{id:
logprob}`` that holds the chosen token's logprob."""


@dataclass(frozen=True)
class ForcedArgmax:
    """Per position of the baseline's continuation (see the module docstring)."""

    chosen: list[int]
    """The baseline's token at each position (``C[t]``)."""
    test_top: list[int]
    """The test side's most likely token at each position."""
    base_margin: list[float]
    test_margin: list[float]
    exact: list[bool]
    """False where a margin is a lower bound (a baseline top-k row without ``test_top[t]``)."""

    def __len__(self) -> int:
        return len(self.chosen)

    def margins(self, t: int) -> tuple[Margin, Margin]:
        """Both margins at position ``t`` (:class:`~.ties.Margin`)."""
        return Margin(self.base_margin[t], self.exact[t]), Margin(self.test_margin[t])

    def disagreements(self, start: int = 0) -> list[int]:
        """The positions from ``start`` on where the test side's most likely token is not the
        baseline's."""
        return [t for t in range(start, len(self.chosen)) if self.test_top[t] != self.chosen[t]]

    @classmethod
    def concatenated(cls, parts: Sequence[ForcedArgmax]) -> ForcedArgmax:
        """The positions of ``parts``, one after the other."""
        return cls(
            [c for p in parts for c in p.chosen],
            [x for p in parts for x in p.test_top],
            [m for p in parts for m in p.base_margin],
            [m for p in parts for m in p.test_margin],
            [e for p in parts for e in p.exact],
        )


def forced_full(base_rows: ArrayLike, test_rows: ArrayLike, chosen: Sequence[int]) -> ForcedArgmax:
    """:class:`ForcedArgmax` of two ``(T, V)`` full-vocabulary logprob arrays scored on the
    same tokens ``chosen`` (float64 differences of the float32 values; exact)."""
    base = np.asarray(base_rows)
    test = np.asarray(test_rows)
    n = len(chosen)
    if base.shape[:1] != (n,) or test.shape[:1] != (n,):
        raise ValueError(
            f"forced_full: {n} tokens for rows of shapes {base.shape} and {test.shape}"
        )
    if n == 0:
        return ForcedArgmax([], [], [], [], [])
    rows = np.arange(n)
    ids = np.asarray(chosen, dtype=np.int64)
    top = np.argmax(test, axis=1)
    base_c = base[rows, ids].astype(np.float64)
    base_x = base[rows, top].astype(np.float64)
    test_x = test[rows, top].astype(np.float64)
    test_c = test[rows, ids].astype(np.float64)
    same = top == ids
    with np.errstate(invalid="ignore"):
        base_margin = np.where(same, 0.0, base_c - base_x)
        test_margin = np.where(same, 0.0, test_x - test_c)
    return ForcedArgmax(
        [int(c) for c in ids],
        [int(x) for x in top],
        [float(m) for m in base_margin],
        [float(m) for m in test_margin],
        [True] * n,
    )


def _logprob(row: Row, token: int) -> float | None:
    if isinstance(row, Mapping):
        value = row.get(token)
        return None if value is None else float(value)
    return float(row[token])


def _argmax(row: Row) -> int:
    if isinstance(row, Mapping):
        return top_one(row)
    return int(np.argmax(np.asarray(row)))


def forced_rows(
    base_rows: Sequence[Row], test_rows: Sequence[Row], chosen: Sequence[int]
) -> ForcedArgmax:
    """:class:`ForcedArgmax` from rows that are full rows or top-k maps on either side (each
    map holding the chosen token's logprob): the test side's most likely token is its row's
    (a top-k holds it), its margin exact; the baseline's margin exact where its row knows the
    test side's token, else the lower bound ``log p_base(c) - min(top-k)``."""
    if not len(base_rows) == len(test_rows) == len(chosen):
        raise ValueError(
            f"forced_rows: {len(chosen)} tokens, {len(base_rows)} baseline rows and "
            f"{len(test_rows)} test rows"
        )
    out = ForcedArgmax([], [], [], [], [])
    for base, test, c in zip(base_rows, test_rows, chosen, strict=True):
        c = int(c)
        x = _argmax(test)
        out.chosen.append(c)
        out.test_top.append(x)
        if x == c:
            out.base_margin.append(0.0)
            out.test_margin.append(0.0)
            out.exact.append(True)
            continue
        base_c, test_x, test_c = _logprob(base, c), _logprob(test, x), _logprob(test, c)
        if base_c is None or test_x is None or test_c is None:
            raise ValueError(f"forced_rows: a row lacks the chosen token {c} or its own top {x}")
        base_x = _logprob(base, x)
        exact = base_x is not None
        if base_x is None:
            base_x = min(float(v) for v in base.values())
        out.base_margin.append(base_c - base_x)
        out.test_margin.append(test_x - test_c)
        out.exact.append(exact)
    return out


@dataclass(frozen=True)
class ForcedStats(PositionStats):
    """:class:`~.kl.PositionStats` with the :class:`ForcedArgmax` of the same positions
    (what a lockstep run accumulates)."""

    forced: ForcedArgmax = field(default_factory=lambda: ForcedArgmax([], [], [], [], []))
