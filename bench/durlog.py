"""A pytest plugin that appends every test phase's duration to a file as the phase ends, so a
long run that is stopped still leaves its per-file times (``--durations`` prints only at the
end). Tab-separated lines: time, node id, phase, seconds, outcome, and the CPU seconds used
so far by the pytest process and every process under it (servers, inner pytest runs):
``utime + stime + cutime + cstime`` of each live process of the tree, from ``/proc`` (a
process that exited counts where its parent reaped it), and the xdist worker that ran it.
The CPU column says how much of a file's wall time kept the cores busy, which is what
running files side by side can win.

    CI=true DURLOG=/tmp/durations.tsv PYTHONPATH=.:bench \\
        .venv/bin/python -m pytest tests/integration -p durlog -p no:randomly -q
"""

from __future__ import annotations

import os
import time
from typing import Any

_PATH = os.environ.get("DURLOG", "durations.tsv")
_IN_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
"""Read at import: a test may take ``PYTEST_XDIST_WORKER`` out of its environment while it runs
(``tests/integration/conftest.py`` does, for the pytest runs it starts)."""
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> tuple[int, float] | None:
    """(parent pid, CPU seconds of the process and its reaped children), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), sum(int(v) for v in fields[11:15]) / _TICKS


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every live process under it (0.0 without ``/proc``)."""
    stats = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if entry.isdigit() and (stat := _stat(int(entry))) is not None:
            stats[int(entry)] = stat
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            total += stats[pid][1]
        todo.extend(children.get(pid, ()))
    return total


def _worker(report: Any) -> str:
    """The xdist worker that ran the test (``gw0``...), or ``-`` without xdist."""
    gateway = getattr(getattr(report, "node", None), "gateway", None)
    return str(getattr(gateway, "id", "-"))


def pytest_runtest_logreport(report: Any) -> None:
    if _IN_WORKER:
        return  # under -n N the controller logs every report, with its workers in its tree
    with open(_PATH, "a", encoding="utf-8") as f:
        f.write(
            f"{time.time():.1f}\t{report.nodeid}\t{report.when}\t{report.duration:.3f}\t"
            f"{report.outcome}\t{tree_cpu_s(os.getpid()):.1f}\t{_worker(report)}\n"
        )
