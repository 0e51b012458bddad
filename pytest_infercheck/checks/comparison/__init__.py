"""The comparison family (compare, sweep, diff): :mod:`.kinds` declares the three kinds,
:mod:`.run` does their work, :mod:`.prompt` compares one prompt, :mod:`.aggregate` pools a
suite, :mod:`.verdicts` applies the per-item thresholds, :mod:`.present` shows the results."""

from .kinds import COMPARE, DIFF, SWEEP

__all__ = ["COMPARE", "DIFF", "SWEEP"]
