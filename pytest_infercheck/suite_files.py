"""Finding a suite's file (a bundled suite's name or a path) and reading its records: JSON
Lines or YAML, each record with its 1-based line, before any validation (:mod:`.suite_records`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

from .strict import nearest
from .suite_spec import SUITE_SUFFIXES, SuiteError, type_name
from .yamlpos import SourceError, load_positioned


def bundled_suites_dir() -> Path:
    """Directory holding the bundled suites.

    In an installed wheel the suites live next to this module (``pytest_infercheck/suites/``);
    in a source checkout they are the repository's top-level ``suites/`` directory.
    """
    installed = Path(__file__).parent / "suites"
    if installed.is_dir():
        return installed
    return Path(__file__).parent.parent / "suites"


def bundled_suite_names() -> list[str]:
    """Sorted names (file stems) of the bundled suites."""
    directory = bundled_suites_dir()
    if not directory.is_dir():
        return []
    return sorted(
        {p.stem for p in directory.iterdir() if p.is_file() and p.suffix in SUITE_SUFFIXES}
    )


def resolve(ref: str, base_dir: Path) -> tuple[Path, str]:
    """Map a suite reference to (file path, suite name)."""
    names = bundled_suite_names()
    if ref in names:
        directory = bundled_suites_dir()
        for suffix in SUITE_SUFFIXES:
            candidate = directory / f"{ref}{suffix}"
            if candidate.is_file():
                return candidate, ref

    path = Path(ref).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    available = ", ".join(names) if names else "(none found)"
    if not path.exists():
        close = suggest_suite(ref, base_dir, names)
        hint = f"did you mean {close!r}?" if close else f"bundled suites: {available}"
        raise SuiteError(
            path,
            None,
            f"suite {ref!r} not found: it is neither a bundled suite nor an existing file ({hint})",
        )
    if not path.is_file():
        raise SuiteError(path, None, f"suite {ref!r} is not a file (bundled suites: {available})")
    if path.suffix not in SUITE_SUFFIXES:
        raise SuiteError(
            path,
            None,
            f"unsupported suite file type {path.suffix or '(no suffix)'!r}: "
            f"expected one of {', '.join(SUITE_SUFFIXES)} (bundled suites: {available})",
        )
    return path, path.stem


def suggest_suite(ref: str, base_dir: Path, names: list[str]) -> str | None:
    """The suite ``ref`` most likely meant (:func:`.strict.nearest`, ignoring case): a
    bundled suite's name, or a suite file in the folder ``ref`` points into, spelt as it
    would be written (``adition`` -> ``addition.jsonl``, also matched by its stem)."""
    spelling = {name: name for name in names}
    written = Path(ref)
    folder = written.parent if written.is_absolute() else Path(base_dir) / written.parent
    try:
        files = sorted(p for p in folder.iterdir() if p.is_file())
    except OSError:
        files = []
    for file in files:
        if file.suffix in SUITE_SUFFIXES:
            shown = str(written.parent / file.name)
            spelling.setdefault(shown, shown)
            spelling.setdefault(str(written.parent / file.stem), shown)
    close = ref if ref in spelling else nearest(ref, spelling)
    return None if close is None else spelling[close]


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """``object_pairs_hook`` for :func:`json.loads` that refuses repeated keys."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _reject_constant(name: str) -> Any:
    """``parse_constant`` for :func:`json.loads`: NaN and Infinity are not valid JSON."""
    raise ValueError(f"{name} is not allowed")


def jsonl_records(path: Path, content: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, record) for each non-blank, non-comment JSONL line."""
    # Split on "\n" only: str.splitlines() would also split on characters such as U+2028 that
    # may legitimately appear inside JSON strings, and the line numbers would drift.
    for number, line in enumerate(content.split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith(("//", "#")):
            continue
        try:
            record = json.loads(
                stripped,
                object_pairs_hook=_reject_duplicate_keys,
                parse_float=Decimal,
                parse_constant=_reject_constant,
            )
        except json.JSONDecodeError as exc:
            raise SuiteError(path, number, f"invalid JSON: {exc.msg} (column {exc.colno})") from exc
        except ValueError as exc:
            raise SuiteError(path, number, f"invalid JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise SuiteError(path, number, f"expected a JSON object, got {type_name(record)}")
        yield number, record


def yaml_records(path: Path, content: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (1-based line number, record) for each record of a YAML suite: a top-level list,
    or a mapping whose only key is ``prompts:``."""
    try:
        source = load_positioned(path, content)
    except SourceError as exc:
        raise SuiteError(exc.path, exc.line, exc.reason) from exc
    items: Any = source.data
    prefix: tuple[str, ...] = ()
    if items is None:
        return
    if isinstance(items, dict):
        for key in items:
            if key != "prompts":
                raise SuiteError(
                    path,
                    source.line_of((key,)),
                    f"unknown top-level key {key!r}: a suite mapping may only contain 'prompts'",
                )
        if "prompts" not in items:
            raise SuiteError(path, 1, "top-level mapping has no 'prompts' key")
        items, prefix = items["prompts"], ("prompts",)
    if not isinstance(items, list):
        raise SuiteError(
            path,
            source.line_of(prefix),
            "expected a list of prompt records (or a mapping with a 'prompts:' list)",
        )
    for index, record in enumerate(items):
        line = source.line_of((*prefix, index)) or 1
        if not isinstance(record, dict):
            raise SuiteError(path, line, f"expected a mapping, got {type_name(record)}")
        yield line, record
