"""Truncation: an engine that counts fewer prompt tokens than it was sent has cut the prompt
(a context limit applied silently, a gateway that shortened the request: Ollama #3839 answered
such prompts with a 200).

A server backend reads, beside each generation, the engine's own count of the prompt it
generated from (``counted``: vLLM's ``usage.prompt_tokens``, llama-server's
``tokens_evaluated``, SGLang's ``meta_info.prompt_tokens``) into
:attr:`~.base.Generation.prompt_tokens`, and knows how many tokens it sent (``sent``): the
number of ids of a prompt sent as token ids (what the backend's render tokenized, or another
backend's ids it verified it takes as they are). The comparison, made for every generation
of those backends (llama-server's teacher-forced scoring requests too), whatever check asked
for it (:func:`check_prompt_count`):

    truncated  <=>  counted < sent

A faithful engine processes every token it was sent and may add tokens of its own (a BOS, a
chat template's turn markers): ``counted >= sent``, and more never fails (the
``request-conformance`` kind's ``usage`` probe holds a count to equality where it asks). A
truncated generation is not an answer to the request that was sent: it is raised as
:class:`PromptTruncated`, a :class:`~.base.BackendError` whose rule is ``truncated``, so the
item whose generation it was fails as the framework fails a request that failed
(:mod:`~pytest_infercheck.verdict.conduct`), naming both counts: ``the server counted 512
prompt tokens of the 2048 sent: truncated``.

A generation is not measured when the engine reports no count, or the prompt went as text or
messages (templated by the server: the OpenAI-compatible and Ollama backends, every backend's
``chat`` and ``messages`` endpoints), whose tokens the backend does not count without asking
the engine; that is said once per backend, as a WARNING record of the logger :data:`LOG`
(``pytest_infercheck.truncation``) naming it and why, never passed in silence (a log record,
not a Python warning: a warning would change every run's outcome counts). mlx-lm in process
generates from the ids it holds: there is no request to cut.
"""

from __future__ import annotations

import logging
import weakref
from typing import TYPE_CHECKING

from .base import BackendError

if TYPE_CHECKING:
    from .base import Backend, Generation

AS_TEXT = "the prompt goes as text or messages, not token ids (no sent count to hold it to)"
"""Why a backend that sends text is not measured."""
TRUNCATED = "truncated"
"""The rule a truncated generation fails under (a violation's source)."""


LOG = logging.getLogger("pytest_infercheck.truncation")
"""Where a backend whose generations cannot be measured for truncation is said, with why."""


class PromptTruncated(BackendError):
    """A generation whose engine counted fewer prompt tokens (``counted``) than were sent
    (``sent``)."""

    rule = TRUNCATED

    def __init__(self, backend: str, counted: int, sent: int) -> None:
        self.counted = counted
        self.sent = sent
        self.message = truncation_text(counted, sent)
        super().__init__(f"backend {backend!r}: {self.message}")


def truncation_text(counted: int, sent: int) -> str:
    """``the server counted 512 prompt tokens of the 2048 sent: truncated``."""
    return f"the server counted {counted} prompt tokens of the {sent} sent: {TRUNCATED}"


def truncated(counted: int | None, sent: int | None) -> bool | None:
    """Whether a prompt of ``sent`` tokens was cut by an engine that counted ``counted``
    (``counted < sent``); None: not measured (either count unknown)."""
    if counted is None or sent is None:
        return None
    return counted < sent


def sent_ids(prompt: object) -> int | None:
    """The number of token ids of a request body's ``prompt`` when it is a list of ids (what
    llama-server's ``/completion`` and vLLM's ``/v1/completions`` are sent); None: text."""
    if isinstance(prompt, list) and all(isinstance(i, int) for i in prompt):
        return len(prompt)
    return None


def check_prompt_count(
    backend: Backend, generation: Generation, sent: int | None, *, why: str = ""
) -> Generation:
    """``generation`` (and its other choices, where the engine counted them apart) checked
    against the ``sent`` prompt tokens (see the module docstring): raises
    :class:`PromptTruncated` when the engine counted fewer; records ``sent`` on each
    (:attr:`~.base.Generation.prompt_sent`). Not measured (the first choice's count or
    ``sent`` unknown): said once per backend and reason (``why``: how the prompt went, when
    ``sent`` is None)."""
    for one in (generation, *generation.others):
        one.prompt_sent = sent
        cut = truncated(one.prompt_tokens, sent)
        if cut:
            assert one.prompt_tokens is not None and sent is not None
            raise PromptTruncated(backend.name, one.prompt_tokens, sent)
    if truncated(generation.prompt_tokens, sent) is None:
        reason = why or (
            "the prompt was not sent as token ids"
            if sent is None
            else "the engine reported no prompt token count"
        )
        _say_unmeasured(backend, reason)
    return generation


_SAID: weakref.WeakKeyDictionary[Backend, set[str]] = weakref.WeakKeyDictionary()
"""By backend: the reasons already said (once per backend object, so once per run)."""


def _say_unmeasured(backend: Backend, reason: str) -> None:
    said = _SAID.setdefault(backend, set())
    if reason in said:
        return
    said.add(reason)
    LOG.warning("backend %r (%s): truncation not measured: %s", backend.name, backend.kind, reason)
