"""Prompt suites: loading, validating and addressing the prompts that infercheck runs.

A suite is a file of prompt records, either JSON Lines (``.jsonl``: one JSON object per line) or
YAML (``.yaml`` / ``.yml``: a top-level list of records, or a mapping with a ``prompts:`` list).
Eight suites ship with the package (see :func:`bundled_suite_names`) and can be referred to by name.

Each record accepts these keys:

``id``
    Optional stable identifier (``^[A-Za-z0-9_.-]+$``, not one of :data:`RESERVED_IDS`). When it
    is missing, one is derived from the prompt text with :func:`derive_prompt_id`.
``prompt`` (alias ``text``)
    The user message (non-empty); exactly one of ``prompt`` and ``messages`` is required.
``messages``
    A conversation instead of ``prompt`` (see :mod:`.conversation`): a list of turns, each
    ``{"role": ..., "content": ...}`` or ``{"role": "assistant", "generate": true}`` (produced
    by the target and fed back). An optional first ``system`` turn, then ``user`` and
    ``assistant`` turns alternating, starting with ``user`` and ending with ``user`` or with
    tool results. With ``tools``, an assistant turn may call them (``"tool_calls": [{"name":
    ..., "arguments": {...}}, ...]``, ``content`` then optional) and must then be followed by
    one ``{"role": "tool", "name": ..., "content": ...}`` turn per call, in the calls' order,
    each naming its call's function; after the results comes an assistant turn (the answer to
    them, given, ``generate`` or calling again) or the end of the conversation (the target
    answers the results). The prompt's ``text`` is the last user turn's, ``system`` the
    system turn's; ``answer`` / ``answer_kind`` apply to the target's answer to the last
    turn. Without an ``id``, one is derived from every turn. A ``system`` key beside
    ``messages`` is an error (give a system turn).
``category``
    Optional short topic tag.
``max_tokens``
    Optional positive integer generation budget.
``answer`` / ``answer_kind``
    Optional reference answer (a string; JSON/YAML numbers and booleans are converted to strings)
    and how to compare it: one of :data:`ANSWER_KINDS`. ``answer_kind`` is required whenever
    ``answer`` is given; it may be given alone (e.g. ``code`` with no reference solution).
    The answer must be one value of its kind as read by the parser that scores outputs
    (:func:`~pytest_infercheck.metrics.answers.parse_reference`): ``"12,34"`` is not a number.
    Of ``answer_kind: tool_call`` (which needs ``tools``), ``answer`` is one call ``{"name":
    ..., "arguments": {...}}`` or a non-empty list of them, each naming an offered tool with
    arguments valid against its ``parameters``; it is kept as
    :func:`~pytest_infercheck.tools.canonical_calls` of the calls.
``system``
    Optional system message.
``tools``
    Optional non-empty list of functions offered to the model, as OpenAI function schemas:
    ``{"type": "function", "function": {"name": ..., "description": ..., "parameters":
    {...}}}`` with a name of letters, digits, ``_`` and ``-`` (at most 64, unique in the
    list), an optional description and ``parameters`` a valid JSON schema of ``type:
    object`` (``{"type": "object", "properties": {}}``: no arguments).
``tool_choice``
    Optional, with ``tools``: ``auto``, ``none``, ``required`` or ``{"type": "function",
    "function": {"name": ...}}`` naming an offered tool (sent to servers as OpenAI
    ``tool_choice``; a chat template does not see it). ``none`` contradicts a ``tool_call``
    answer, and a named function one that calls another function.
``response_format``
    Optional JSON schema (the schema itself, not OpenAI's ``{"type": "json_schema", ...}``
    wrapper) the answer's content must follow; it must be a valid schema (of the draft its
    ``$schema`` names, else 2020-12).

Any other key is an error. Every problem is reported as a :class:`SuiteError` whose message
starts with ``path:line:`` so that it can be located in the file, and names the field (and
turn, tool or call) at fault.
"""

from __future__ import annotations

from pathlib import Path

from .suite_files import (
    bundled_suite_names,
    bundled_suites_dir,
    jsonl_records,
    resolve,
    yaml_records,
)
from .suite_ids import derive_prompt_id
from .suite_records import validate_record
from .suite_spec import ANSWER_KINDS, RESERVED_IDS, SUITE_SUFFIXES, Prompt, Suite, SuiteError
from .suite_turns import parse_turns

__all__ = [
    "ANSWER_KINDS",
    "RESERVED_IDS",
    "SUITE_SUFFIXES",
    "Prompt",
    "Suite",
    "SuiteError",
    "bundled_suite_names",
    "bundled_suites_dir",
    "derive_prompt_id",
    "load_suite",
    "parse_turns",
]


def load_suite(ref: str, base_dir: Path) -> Suite:
    """Load and validate a suite.

    ``ref`` is either the name of a bundled suite (e.g. ``"reasoning"``) or a path, relative to
    ``base_dir`` unless absolute, to a ``.jsonl``, ``.yaml`` or ``.yml`` file. The suite is named
    after the bundled suite or the file stem.

    Raises:
        SuiteError: the suite does not exist or is invalid; the message names file and line.
    """
    path, name = resolve(ref, base_dir)
    try:
        content = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SuiteError(path, None, f"file is not valid UTF-8: {exc.reason}") from exc
    except OSError as exc:
        raise SuiteError(path, None, f"cannot read suite file: {exc.strerror or exc}") from exc

    if path.suffix == ".jsonl":
        records = list(jsonl_records(path, content))
    else:
        records = list(yaml_records(path, content))
    if not records:
        raise SuiteError(path, None, "suite contains no prompts")

    prompts: list[Prompt] = []
    first_line: dict[str, int] = {}
    for line, raw in records:
        prompt = validate_record(path, line, raw)
        if prompt.id in first_line:
            note = "" if "id" in raw else " (derived from the prompt text)"
            lines = f"lines {first_line[prompt.id]} and {line}"
            raise SuiteError(path, line, f"duplicate prompt id {prompt.id!r}{note}: {lines}")
        first_line[prompt.id] = line
        prompts.append(prompt)
    return Suite(name=name, path=path, prompts=tuple(prompts))
