"""Waiting for an event in a test on a shared machine: poll it, with a deadline stretched by
the load at each poll, so a run among other runs' processes is given the time its CPU work
needs, and an event that never comes still fails, naming what was awaited."""

from __future__ import annotations

import os
import time
from collections.abc import Callable


def under_load(seconds: float) -> float:
    """``seconds`` on an idle machine, stretched by the load at this moment (the 1-minute
    load average per core, at least 1): how long to allow work whose CPU time is bounded but
    whose wall time is not, on a machine shared with other runs."""
    return seconds * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))


def wait_for(done: Callable[[], bool], idle_s: float, what: str) -> None:
    """Poll ``done`` until it holds; fail naming ``what`` once ``idle_s``, stretched by the
    load as it is at each poll (:func:`under_load`), has passed."""
    started = time.monotonic()
    while not done():
        assert time.monotonic() - started < under_load(idle_s), f"{what} after {idle_s:g} s"
        time.sleep(0.1)
