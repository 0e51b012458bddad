"""The one reading of an infercheck node id: ``FILE::CHECK::SUITE::ITEM[PARAM]``.

An infercheck item's node id is built by pytest from its collectors (:mod:`.collect`): the
matrix file (its path from the rootdir, ending in ``.yaml`` or ``.yml``), the check
(``kind(label)``, or ``kind(name)``), the suite, and the item (a prompt's id, a stress level,
``aggregate``), with pytest parameters in brackets where the kind plans them
(``tu001[llama]``). :class:`NodeId` holds those parts, and every module outside a kind's own
package reads a node id through it instead of splitting the string.

Reading is unambiguous for every id the collectors build, and for a few they cannot:

- the file is the text before the first ``::`` (a path holds no ``::``);
- the parameters are the bracketed tail of the item: they open at the first ``[`` after
  two ``::`` (check and suite) that is not the first character of its part, so a parameter
  may itself hold ``::``, ``[`` or ``]``;
- before the parameters, the item is the last ``::`` part, the suite the one before it and
  the check everything between the file and the suite (a check label holding ``::``, from a
  model named so, stays whole).

A node id that is not an infercheck item's (a Python test's, a collector's) is not a
:class:`NodeId`: :meth:`NodeId.parse` returns None for it.
"""

from __future__ import annotations

from dataclasses import dataclass

SEP = "::"
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class NodeId:
    """The parts of an infercheck item's node id; ``str(node)`` is the node id again."""

    file: str
    """The matrix file, as pytest writes it (relative to the rootdir)."""
    check: str
    """``kind(label)``: ``compare(bf16-vs-q4)``, ``stress(q4.llama)``, ``structured-parity(x)``."""
    suite: str
    item: str
    """The item's name without parameters: a prompt id, ``c8``, ``aggregate``."""
    param: str | None = None
    """The text between the brackets of ``item[param]``; None without brackets."""

    @classmethod
    def parse(cls, nodeid: str) -> NodeId | None:
        """The parts of ``nodeid``, or None when it is not an infercheck item's (no matrix
        file first, or fewer than check, suite and item after it)."""
        file, sep, rest = nodeid.partition(SEP)
        if not sep or not file.endswith(YAML_SUFFIXES):
            return None
        param: str | None = None
        if rest.endswith("]"):
            opening = _param_start(rest)
            if opening is not None:
                rest, param = rest[:opening], rest[opening + 1 : -1]
        parts = rest.split(SEP)
        if len(parts) < 3 or not all(parts[-2:]):
            return None
        return cls(file, SEP.join(parts[:-2]), parts[-2], parts[-1], param)

    @property
    def kind(self) -> str:
        """The check's kind: ``compare`` of ``compare(bf16-vs-q4)``."""
        return self.check.partition("(")[0]

    @property
    def name(self) -> str:
        """The item's name as pytest shows it: ``tu001[llama]``, ``r017``."""
        return self.item if self.param is None else f"{self.item}[{self.param}]"

    @property
    def suite_id(self) -> str:
        """The node id of its check x suite: ``FILE::CHECK::SUITE``."""
        return SEP.join((self.file, self.check, self.suite))

    @property
    def in_file(self) -> str:
        """The node id without its file: ``CHECK::SUITE::ITEM[PARAM]`` (what a report names
        an item by when the file is known)."""
        return SEP.join((self.check, self.suite, self.name))

    @property
    def unparametrized(self) -> str:
        """The node id without its ``[parameters]``."""
        return SEP.join((self.file, self.check, self.suite, self.item))

    @property
    def parts(self) -> tuple[str, ...]:
        """The ``::`` parts, file first, the item with its parameters last."""
        return (self.file, self.check, self.suite, self.name)

    def __str__(self) -> str:
        return SEP.join(self.parts)


def _param_start(rest: str) -> int | None:
    """Where the parameters of ``CHECK::SUITE::ITEM[PARAM]`` open: the first ``[`` after at
    least two ``::`` (check and suite) that is not the first character of its ``::`` part
    (an item has a name before its parameters). None when there is none."""
    seen = 0
    i = 0
    while i < len(rest):
        if rest.startswith(SEP, i):
            seen += 1
            i += len(SEP)
            continue
        if rest[i] == "[" and seen >= 2 and not rest.startswith(SEP, i - len(SEP)):
            return i
        i += 1
    return None


def parse_nodeid(nodeid: str) -> NodeId | None:
    """:meth:`NodeId.parse`."""
    return NodeId.parse(nodeid)


def suite_id_of(nodeid: str) -> str:
    """The check x suite an item's node id belongs to; any other node id stands for itself."""
    node = NodeId.parse(nodeid)
    return nodeid if node is None else node.suite_id


def file_of(nodeid: str) -> str:
    """The file part of any node id (the text before its first ``::``)."""
    return nodeid.partition(SEP)[0]


def in_file(nodeid: str) -> str:
    """The node id without its file part (any node id)."""
    node = NodeId.parse(nodeid)
    return node.in_file if node is not None else nodeid.partition(SEP)[2] or nodeid
