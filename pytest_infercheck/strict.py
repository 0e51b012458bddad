"""The base of every model of the YAML matrix: unknown keys are errors, values are frozen.

The lowest of the matrix's modules (pydantic only): the backends' specs, the check kinds'
specs and the matrix itself derive from :class:`Strict`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict


class Strict(BaseModel):
    """A model whose unknown keys are errors (at their line) and whose values are frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)


def nearest(word: str, options: Iterable[str]) -> str | None:
    """The option ``word`` most likely meant, ignoring case (``vLLM`` -> ``vllm``,
    ``Compar`` -> ``compare``): the option equal to it but for case, else the closest by
    :func:`difflib.get_close_matches` (ratio >= 0.6) of the lowered spellings; None when
    none is near (or ``word`` is itself an option: nothing to suggest)."""
    options = [str(option) for option in dict.fromkeys(options)]
    if word in options:
        return None
    folded = {option.lower(): option for option in options}
    if word.lower() in folded:
        return folded[word.lower()]
    close = difflib.get_close_matches(word.lower(), list(folded), n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def unknown_key(key: str, allowed: Iterable[str]) -> str:
    """``unknown key 'max_kll' (did you mean 'max_kl'?)``: the nearest of the keys the mapping
    accepts (:func:`nearest`, ignoring case), else all of them."""
    allowed = list(allowed)
    close = nearest(key, allowed)
    hint = f" (did you mean {close!r}?)" if close else ""
    if not close and allowed:
        hint = f" (expected one of: {', '.join(sorted(allowed))})"
    return f"unknown key {key!r}{hint}"


_TYPES = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "string": "a string",
    "str": "a string",
    "dict": "a mapping",
    "list": "a list",
    "model": "a mapping",
    "model_attributes": "a mapping",
}


def plain_message(error: Mapping[str, Any]) -> str:
    """What a pydantic error (one of ``ValidationError.errors()``) says, in our words: the
    message a validator raised without pydantic's ``Value error,`` prefix; a bound as
    ``must be >= 0, got -1``; a choice as ``expected 'any' or 'decisive', got 'Any' (did
    you mean 'any'?)``; a wrong type as ``expected a number, got 'lots'``. Other errors keep
    pydantic's message."""
    kind = str(error.get("type", ""))
    ctx = error.get("ctx") or {}
    got = error.get("input")
    if kind in ("value_error", "assertion_error") and "error" in ctx:
        return str(ctx["error"])
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<"}
    bounds["less_than_equal"] = "<="
    if kind in bounds:
        limit = next(iter(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")), "?")
        shown = format(limit, "g") if isinstance(limit, int | float) else limit
        return f"must be {bounds[kind]} {shown}, got {got!r}"
    if kind == "literal_error":
        expected = str(ctx.get("expected", ""))
        choices = re.findall(r"'([^']*)'", expected)
        close = nearest(str(got), choices) if isinstance(got, str) else None
        hint = f" (did you mean {close!r}?)" if close else ""
        return f"expected {expected}, got {got!r}{hint}"
    if kind == "missing":
        return "required, but not given"
    if kind == "too_short" and "min_length" in ctx:
        least = ctx["min_length"]
        return f"needs at least {least} " + ("entry" if least == 1 else "entries")
    if kind == "string_pattern_mismatch":
        return f"{got!r} does not match {ctx.get('pattern')}"
    for prefix, noun in _TYPES.items():
        if kind in (f"{prefix}_type", f"{prefix}_parsing"):
            return f"expected {noun}, got {got!r}"
    return str(error.get("msg", kind))
