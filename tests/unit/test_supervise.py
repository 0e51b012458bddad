"""Stopping a server's process group (``supervise.stop_group``): the whole group, at once."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from pytest_infercheck.supervise import alive, stop_group


def test_a_group_whose_leader_forked_a_child_is_stopped_whole_and_at_once(
    tmp_path: Path,
) -> None:
    """A shell (our direct child, its group's leader) that forked a child and waits: both
    are stopped by one SIGTERM to the group, and stop_group returns as soon as they are gone
    (the shell is reaped while waiting; unreaped, it stayed a zombie member of its group and
    stop_group waited out the whole grace period)."""
    pids = tmp_path / "pids"
    shell = subprocess.Popen(
        ["sh", "-c", f"sleep 60 & echo $! > {pids}; wait"], start_new_session=True
    )
    deadline = time.monotonic() + 10
    while not (pids.exists() and pids.read_text().strip()):
        assert time.monotonic() < deadline, "the shell did not start its child"
        time.sleep(0.01)
    child = int(pids.read_text())
    assert alive(shell.pid) and alive(child)
    started = time.monotonic()
    stop_group(shell.pid, grace_s=30.0)
    assert time.monotonic() - started < 10.0  # typically 0.05 s; 30 s if the shell is not reaped
    assert not alive(shell.pid) and not alive(child)
    shell.wait(timeout=5)  # already reaped: returns at once
