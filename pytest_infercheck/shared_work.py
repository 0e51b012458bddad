"""Work done once per pytest run and shared by the controller and its xdist workers, through
JSON files and ``flock`` locks in a folder they all see (a subfolder of the managed-servers
folder, see :mod:`.state`; it is removed at the end of the run).

- :meth:`SharedWork.once` computes a JSON value under an exclusive lock on its name: the
  first process computes and publishes it, every later one (waiting on the lock meanwhile)
  reads it. A process that dies while computing releases the lock (the kernel drops
  ``flock`` locks with their process) and the next one computes the value.
- :meth:`SharedWork.locked` is a reader/writer lock on a name: ``exclusive=False`` for work
  that may overlap (load on a server), ``exclusive=True`` for work that must be alone.

Lock order, to stay free of deadlocks: a ``once`` name, then another ``once`` name, then a
``locked`` name; never a ``once`` while holding a ``locked`` name.

Without a folder (a generation cache with no server pool) everything stays in this process.
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any


class SharedWork:
    """Values computed once per run; see the module docstring."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
        self._values: dict[str, Any] = {}

    @contextmanager
    def locked(self, name: str, *, exclusive: bool) -> Iterator[None]:
        """Hold the lock ``name`` (shared or exclusive) across processes."""
        if self.folder is None:
            yield
            return
        with open(self.folder / f"{name}.lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def once(self, name: str, compute: Callable[[], Any]) -> Any:
        """The value ``name``: read if published, else computed by ``compute`` and published."""
        if name in self._values:
            return self._values[name]
        path = None if self.folder is None else self.folder / f"{name}.json"
        guard = nullcontext() if path is None else self.locked(f"{name}.once", exclusive=True)
        with guard:
            if path is not None and path.exists():
                value = json.loads(path.read_text(encoding="utf-8"))
            else:
                text = json.dumps(compute())
                value = json.loads(text)  # the same plain value, whoever computed it
                if path is not None:
                    tmp = path.with_suffix(f".{os.getpid()}.tmp")
                    tmp.write_text(text, encoding="utf-8")
                    tmp.replace(path)
        self._values[name] = value
        return value
