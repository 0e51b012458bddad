"""A quicker interpreter exit after a run that collected a matrix.

CPython's finalisation (``Py_FinalizeEx``) runs the cyclic garbage collector over every object
still alive while it tears the modules down. With what a run loads (pytest and its plugins,
pydantic, numpy, httpx, and mlx for in-process models) that took 0.10-0.2 s after the last
hook of a 1.7 s ``diff`` run, about a tenth of it (``bench/README.md``, "The diff's own
time").

:func:`freeze_at_exit` registers :func:`gc.freeze` as an ``atexit`` handler: at exit, every
object alive is moved to the collector's permanent generation, so the finalisation's
collections find nothing to traverse. Reference counting still frees what it frees (modules'
dictionaries are cleared as before, files are closed); only objects kept alive by reference
cycles stay unfreed, and Python never promises to finalise objects that still exist when the
interpreter exits (the language reference on ``object.__del__``). The plugin writes its own
files (results, goldens, reports) before it returns from its hooks, never from a finaliser.

Registered once per process and only at interpreter exit: pytester's in-process runs and a
long-lived process that calls ``pytest.main`` keep their collector untouched.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


def freeze_at_exit() -> None:
    """Freeze the garbage collector's objects when the interpreter exits (once)."""
    global _registered
    if not _registered:
        atexit.register(gc.freeze)
        _registered = True
