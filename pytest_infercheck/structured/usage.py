"""Token counts of a response, whatever the path calls them."""

from __future__ import annotations

from typing import Any

from .records import Usage


def count(value: Any) -> int | None:
    """``value`` as a token count: a non-negative int (a bool is not one), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_usage(doc: Any, prompt_key: str, completion_key: str) -> Usage | None:
    """The counts ``doc[prompt_key]`` and ``doc[completion_key]`` (OpenAI ``prompt_tokens``
    / ``completion_tokens``, Anthropic ``input_tokens`` / ``output_tokens``, Ollama
    ``prompt_eval_count`` / ``eval_count``); None when ``doc`` carries neither."""
    if not isinstance(doc, dict):
        return None
    prompt, completion = count(doc.get(prompt_key)), count(doc.get(completion_key))
    if prompt is None and completion is None:
        return None
    return Usage(prompt, completion)
