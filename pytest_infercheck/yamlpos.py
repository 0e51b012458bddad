"""YAML loading that remembers where every value came from, for errors that name a line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Loc = tuple[str | int, ...]


class SourceError(Exception):
    """An error in a user's file, reported as ``file:line: where: what``."""

    def __init__(self, path: Path, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.reason = message
        where = f"{path}:{line}" if line else str(path)
        super().__init__(f"{where}: {message}")


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
    """``("checks", 0, "compare", "test")`` -> ``checks[0].compare.test``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def load_positioned(path: Path) -> PositionedYaml:
    """Parse ``path`` with the safe loader; syntax errors become :class:`SourceError`."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(path, None, f"cannot read: {exc.strerror or exc}") from exc
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise SourceError(path, line, f"YAML syntax error: {exc.problem or exc}") from exc
    lines: dict[Loc, int] = {}
    if node is None:
        return PositionedYaml(path, None, {(): 1})
    _index(node, (), lines)
    data = yaml.safe_load(text)
    return PositionedYaml(path, data, lines)


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines.setdefault(loc, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            key = key_node.value
            lines[(*loc, key)] = key_node.start_mark.line + 1
            _index(value_node, (*loc, key), lines)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _index(item, (*loc, i), lines)
