"""The one list of check kinds. Adding a kind: its module (spec, run, presentation; see
:mod:`.protocol`) and one line here."""

from __future__ import annotations

from .batch_invariance import BATCH_INVARIANCE
from .cache_pollution import CACHE_POLLUTION
from .comparison import COMPARE, DIFF, SWEEP
from .determinism import DETERMINISM
from .parity import ENDPOINT_PARITY, STREAM_PARITY
from .protocol import CheckKind
from .stress import STRESS
from .tokenization import TOKENIZATION

KINDS: tuple[CheckKind, ...] = (
    COMPARE,
    SWEEP,
    DIFF,
    DETERMINISM,
    BATCH_INVARIANCE,
    STRESS,
    STREAM_PARITY,
    ENDPOINT_PARITY,
    TOKENIZATION,
    CACHE_POLLUTION,
)
"""Every kind, in the order the terminal summary shows their families."""

KIND_NAMES = tuple(k.name for k in KINDS)
_BY_NAME = {k.name: k for k in KINDS}


def kind_named(name: object) -> CheckKind | None:
    """The kind whose YAML key is ``name`` (None for an unknown one, e.g. from a results file
    of a newer version)."""
    return _BY_NAME.get(name) if isinstance(name, str) else None
