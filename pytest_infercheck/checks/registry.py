"""The one list of check kinds. Adding a kind: its package of facets (a
:class:`~.framework.kind.CheckKind`: spec, gather, judge, summarize, present) and one line
here.

Each line names the kind's YAML key, its module and the :class:`~.framework.kind.CheckKind` in it.
A kind's module is imported when the kind is first asked for (:func:`kind_named`), so a
matrix that uses one kind imports that kind only (the kinds' modules bring pydantic specs,
metrics and numpy: importing all of them costs more than the rest of collection).
``KINDS`` (every kind) imports them all.
"""

from __future__ import annotations

import importlib

from .framework.kind import CheckKind

_MODULES: tuple[tuple[str, str, str], ...] = (
    ("compare", ".comparison", "COMPARE"),
    ("sweep", ".comparison", "SWEEP"),
    ("diff", ".comparison", "DIFF"),
    ("determinism", ".determinism", "DETERMINISM"),
    ("batch-invariance", ".batch_invariance", "BATCH_INVARIANCE"),
    ("stress", ".stress", "STRESS"),
    ("stream-parity", ".parity", "STREAM_PARITY"),
    ("endpoint-parity", ".parity", "ENDPOINT_PARITY"),
    ("tokenization", ".tokenization", "TOKENIZATION"),
    ("cache-pollution", ".cache_pollution", "CACHE_POLLUTION"),
    ("cache-parity", ".cache_parity", "CACHE_PARITY"),
    ("structured-parity", ".structured_parity", "STRUCTURED_PARITY"),
    ("request-conformance", ".request_conformance", "REQUEST_CONFORMANCE"),
    ("sampling", ".sampling", "SAMPLING"),
)
"""``(YAML key, module relative to this package, CheckKind's name)`` of every kind, in the
order the terminal summary shows their families."""

KIND_NAMES = tuple(name for name, _, _ in _MODULES)
_WHERE = {name: (module, attr) for name, module, attr in _MODULES}


def kind_named(name: object) -> CheckKind | None:
    """The kind whose YAML key is ``name``, its module imported on first use (None for an
    unknown one, e.g. from a results file of a newer version). Raises if the module's kind
    carries another name than its line here.

    The kind is always that of the module ``sys.modules`` holds now (no cache of its own): a
    kind kept after its module was dropped from ``sys.modules`` (pytester's in-process runs
    drop the modules they imported) has records whose annotations no longer resolve
    (pydantic looks their names up in ``sys.modules``)."""
    if not isinstance(name, str) or name not in _WHERE:
        return None
    module, attr = _WHERE[name]
    kind: CheckKind = getattr(importlib.import_module(module, __package__), attr)
    if kind.name != name:
        raise RuntimeError(f"registry line {name!r} names {module}.{attr}, kind {kind.name!r}")
    return kind


def all_kinds() -> tuple[CheckKind, ...]:
    """Every kind, in :data:`KIND_NAMES` order (imports every kind's module)."""
    kinds = tuple(kind_named(name) for name in KIND_NAMES)
    assert all(k is not None for k in kinds)
    return kinds  # type: ignore[return-value]


def __getattr__(name: str) -> tuple[CheckKind, ...]:
    if name == "KINDS":  # every kind: imports them all (the schema, tests)
        return all_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
