"""A server backend's ``serve:`` command template: what is wrong with one (said when the
matrix loads) and the arguments it becomes (when the server is started, :mod:`..servers`).

Pure (no process, no pydantic): the backends' specs check the template with it.
"""

from __future__ import annotations

import re
import shlex

PLACEHOLDERS = ("model", "port")
_PLACEHOLDER = re.compile(r"\{(model|port)\}")
_WORD_IN_BRACES = re.compile(r"(?<!\$)\{([A-Za-z_][A-Za-z0-9_]*)\}")
"""``{word}`` not preceded by ``$`` (``${HOME}`` is the shell's): a placeholder or a typo."""


def serve_problems(template: str) -> list[str]:
    """What is certainly wrong with a ``serve:`` command: it cannot be split into arguments
    (an unclosed quote), it has no ``{port}`` (the plugin picks the port and waits on it), or
    it has a ``{word}`` other than ``{model}`` and ``{port}`` (a misspelt placeholder: it
    would be passed as it is). Other braces (JSON, ``${VAR}``) are fine."""
    problems = []
    try:
        shlex.split(template)
    except ValueError as exc:
        problems.append(f"cannot split it into arguments: {exc}")
    unknown = [w for w in dict.fromkeys(_WORD_IN_BRACES.findall(template)) if w not in PLACEHOLDERS]
    for word in unknown:
        problems.append(
            f"unknown placeholder {{{word}}}: only {{model}} and {{port}} are filled in "
            "(other braces, such as JSON, are passed as they are)"
        )
    if "{port}" not in template:
        problems.append("it must contain {port} (the plugin picks a free port and waits on it)")
    return problems


def fill_command(template: str, model: str, port: int) -> list[str]:
    """The arguments of a ``serve:`` command: split as a shell would (no shell runs it),
    then ``{model}`` and ``{port}`` replaced in each argument; every other brace is kept
    (``--speculative-config '{"method": "ngram"}'`` reaches the server as written)."""
    values = {"model": model, "port": str(port)}
    return [_PLACEHOLDER.sub(lambda m: values[m.group(1)], arg) for arg in shlex.split(template)]
