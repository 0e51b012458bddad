"""YAML loading that remembers where every value came from, for errors that name a line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Loc = tuple[str | int, ...]


class SourceError(Exception):
    """An error in a user's file, reported as ``file:line: where: what``; ``more`` are the
    file's other errors, found in the same pass (a user sees them all at once)."""

    def __init__(
        self, path: Path, line: int | None, message: str, more: Sequence[SourceError] = ()
    ) -> None:
        self.path = path
        self.line = line
        self.reason = message
        self.more = list(more)
        where = f"{path}:{line}" if line else str(path)
        text = "\n".join([f"{where}: {message}", *(str(error) for error in self.more)])
        super().__init__(text)

    def each(self) -> list[SourceError]:
        """This error and the file's others, in the order of their lines."""
        return [self, *self.more]

    @classmethod
    def of(cls, errors: Sequence[SourceError]) -> SourceError:
        """One error carrying all of ``errors`` (at least one), sorted by line."""
        ordered = sorted(errors, key=lambda e: e.line or 0)
        first = ordered[0]
        return cls(first.path, first.line, first.reason, ordered[1:])


@dataclass
class PositionedYaml:
    """Plain data from a YAML document plus the 1-based line of every mapping key and item."""

    path: Path
    data: Any
    lines: dict[Loc, int]

    def line_of(self, loc: Sequence[str | int]) -> int | None:
        """The line of the deepest existing prefix of ``loc`` (a missing key -> its parent)."""
        loc = tuple(loc)
        while loc:
            if loc in self.lines:
                return self.lines[loc]
            loc = loc[:-1]
        return self.lines.get((), None)

    def error(self, loc: Sequence[str | int], message: str) -> SourceError:
        return SourceError(self.path, self.line_of(loc), f"{format_loc(loc)}: {message}")


def format_loc(loc: Sequence[str | int]) -> str:
    """``("models", "q4", "path")`` -> ``models.q4.path``; ``("checks", 0, "name")`` ->
    ``checks[0].name``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def load_positioned(path: Path, text: str | None = None) -> PositionedYaml:
    """Parse ``path`` (or ``text`` read from it) with the safe loader.

    Syntax errors and repeated mapping keys (which PyYAML would silently collapse) become
    :class:`SourceError` with their line.
    """
    if text is None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise SourceError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SourceError(path, line, f"invalid YAML: {exc.problem or exc}") from exc
    except yaml.YAMLError as exc:
        raise SourceError(path, None, f"invalid YAML: {exc}") from exc
    lines: dict[Loc, int] = {(): 1}
    if node is not None:
        _index(path, node, (), lines)
    return PositionedYaml(path, data, lines)


def _index(path: Path, node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines[loc] = lines.get(loc, node.start_mark.line + 1) if loc else node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key_node, value_node in node.value:
            key = key_node.value
            key_line = key_node.start_mark.line + 1
            if isinstance(key, str) and key in seen:
                raise SourceError(path, key_line, f"duplicate key {key!r}")
            seen.add(key)
            lines[(*loc, key)] = key_line
            _index(path, value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(path, item, (*loc, i), lines)
