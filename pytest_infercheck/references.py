"""What a matrix's entries name, checked against what it holds and this machine has: a
``model@backend`` against the file's models and backends, a model against what its backend
loads (a llama-server needs a ``gguf``), a suite against the bundled ones and the files
beside the matrix, a local model folder or file against the disk.

Each check answers with a message, or a :class:`~.yamlpos.SourceError` at the line that
names the thing, so :func:`.config.load_matrix` can gather every mistake of a file in one
pass. Names are the file's own, valid or not: a model whose entry is wrong is still a
model, and a reference to it is not a second error.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from .backends.registry import backend_kind
from .golden.names import GOLDEN_NAME
from .matrix import ModelSpec, Target
from .strict import nearest
from .suite_files import resolve
from .suite_spec import SuiteError
from .yamlpos import Loc, PositionedYaml, SourceError


def resolve_ref(
    source: PositionedYaml,
    ref: str,
    loc: Loc,
    models: Collection[str],
    backends: Collection[str],
) -> Target:
    """``model@backend`` (or ``model`` when there is one backend), or ``golden:NAME``, as a
    :class:`Target`; a :class:`SourceError` at ``loc`` naming what is unknown, with the
    nearest name (ignoring case) or the names there are."""
    if ref.startswith("golden:"):
        name = ref.removeprefix("golden:")
        if not GOLDEN_NAME.fullmatch(name):
            raise source.error(loc, f"{ref!r}: a golden name is letters, digits and . _ + - only")
        return Target(model=f"golden.{name}", backend="golden", golden=name)
    model, _, backend = ref.partition("@")
    if not backend:
        if len(backends) != 1:
            raise source.error(loc, f"{ref!r} needs '@backend' (backends: {_names(backends)})")
        backend = next(iter(backends))
    if model not in models:
        raise source.error(loc, unknown("model", model, models))
    if backend not in backends:
        raise source.error(loc, unknown("backend", backend, backends))
    return Target(model=model, backend=backend)


def unknown(what: str, name: str, names: Collection[str]) -> str:
    """``unknown model 'Q4' (did you mean 'q4'?)``, else ``unknown model 'q5' (models: bf16,
    q4)``."""
    close = nearest(name, names)
    hint = f"did you mean {close!r}?" if close else f"{what}s: {_names(names)}"
    return f"unknown {what} {name!r} ({hint})"


def _names(names: Collection[str]) -> str:
    return ", ".join(sorted(names)) or "none"


def model_problem(name: str, spec: ModelSpec, kind: str) -> str | None:
    """Why a backend of ``kind`` cannot be given model ``name``: a
    kind that loads a GGUF file (llama-server) needs ``gguf``; any other needs ``path`` or
    ``repo``, or (a server) ``served_name``. None when it can (:meth:`.config.LoadedMatrix
    .model_source` gives it)."""
    facts = backend_kind(kind)
    if facts is None:
        return None
    if facts.loads == "gguf":
        if spec.gguf is not None:
            return None
        has = [f for f in ("path", "repo", "served_name") if getattr(spec, f) is not None]
        given = f" (it has {' and '.join(has)}, which a {kind} cannot load)" if has else ""
        return f"a {kind} backend loads a GGUF file: add `gguf: FILE.gguf` to model {name!r}{given}"
    if spec.path is not None or spec.repo is not None:
        return None
    if facts.server and spec.served_name is not None:
        return None
    needs = "'path' or 'repo'" + (" or 'served_name'" if facts.server else "")
    return f"a {kind} backend needs {needs}: add one to model {name!r}"


def suite_problem(ref: str, base_dir: Path) -> str | None:
    """Why the suite ``ref`` cannot be found (:func:`.suite_files.resolve`'s reason, with
    the nearest bundled suite or suite file beside the matrix), else None. The generated
    suite ``context-ladder`` (:mod:`.context_ladder`) is found at collection."""
    if ref == "context-ladder":
        return None
    try:
        resolve(ref, base_dir)
    except SuiteError as exc:
        return exc.reason
    return None


def local_problem(spec: ModelSpec, kind: str, local: str | None) -> tuple[str, str] | None:
    """``(field, message)`` when the folder (``path``) or file (``gguf``) a backend of
    ``kind`` loads from this machine is missing; ``local``: that value resolved against the
    matrix's folder (None: nothing local to load)."""
    facts = backend_kind(kind)
    if facts is None or local is None or Path(local).exists():
        return None
    field = facts.loads
    value = spec.gguf if field == "gguf" else spec.path
    what = "file" if field == "gguf" else "folder"
    hub = "" if field == "gguf" else "; a hub model is written `repo: org/name`"
    return field, f"{value} does not exist (the {what} {local}{hub})"


def errors_at(source: PositionedYaml, found: list[tuple[Loc, str]]) -> list[SourceError]:
    """Each ``(loc, message)`` as a :class:`SourceError` at its line."""
    return [source.error(loc, message) for loc, message in found]
