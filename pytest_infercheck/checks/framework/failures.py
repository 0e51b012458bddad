"""A failed request in the server's own words (pure: the exception to text), for the gather
facets' :class:`~pytest_infercheck.verdict.conduct.RequestFailure` and the measures that
count errors (stress)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from ...verdict.conduct import RequestFailure

if TYPE_CHECKING:
    from ...backends.base import BackendError


def server_message(exc: BackendError) -> tuple[str, int | None]:
    """What the server said of a failed request, and its HTTP status (None: no answer): the
    ``error.message`` (or ``detail``, ``error``, ``message``) of a JSON error body, else the
    body, else the exception's text."""
    status = getattr(exc, "status", None)
    body = str(getattr(exc, "body", "") or "").strip()
    if status is None or not body:
        return str(exc), status
    try:
        data = json.loads(body)
    except ValueError:
        return body[:500], status
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"]), status
        for key in ("detail", "error", "message"):
            if data.get(key):
                return str(data[key]), status
    return body[:500], status


def request_failure(side: str, what: str, exc: BackendError) -> RequestFailure:
    """``exc`` (a request of ``side`` for ``what``) as the item's failed request; one with a
    ``rule`` of its own (:class:`~pytest_infercheck.backends.prompt_count.PromptTruncated`:
    ``truncated``) under that rule, with its message."""
    rule = getattr(exc, "rule", None)
    if isinstance(rule, str):  # an answer judged by a rule of its own (``truncated``)
        return RequestFailure(side, what, str(getattr(exc, "message", exc)), None, rule)
    message, status = server_message(exc)
    return RequestFailure(side, what, message, status)
