"""An item a kind plans at collection time."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ItemPlan:
    """One item of a check x suite besides ``aggregate``, known at collection time.

    ``name`` is the item's name in the node id (``r017``, ``c8``, ``self-check``), ``param``
    an optional bracketed parameter (``r017[q4]``, ``e01[chat]``), ``role`` what the item is
    (``prompt``, ``level``, ``hostile``, ``self-check``), ``key`` what it is about (a prompt
    id, a level, a hostile kind): the key that ``-k``/``--lf`` selection is noted under.
    """

    name: str
    role: str
    key: str
    param: str | None = None

    @property
    def full_name(self) -> str:
        """``name[param]``, or ``name``."""
        return self.name if self.param is None else f"{self.name}[{self.param}]"
