"""The base of every model of the YAML matrix: unknown keys are errors, values are frozen.

The lowest of the matrix's modules (pydantic only): the backends' specs, the check kinds'
specs and the matrix itself derive from :class:`Strict`.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A model whose unknown keys are errors (at their line) and whose values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    """``unknown key 'max_kll' (did you mean 'max_kl'?)``: the nearest of the keys the mapping
    accepts, else all of them."""
    allowed = list(allowed)
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if not close and allowed:
        hint = f" (expected one of: {', '.join(sorted(allowed))})"
    return f"unknown key {key!r}{hint}"
