"""A watchdog that runs one server and guarantees it does not outlive pytest.

``python -m pytest_infercheck.supervise --watch PID --log FILE [--exit-file EXIT] -- COMMAND...``
starts COMMAND in its own process group (output to FILE; its pid to ``EXIT.pid``) and then
waits. It stops the whole
group (SIGTERM, a grace period, SIGKILL) when the watched pytest process disappears (a normal
end that forgot, Ctrl-C, a SIGKILLed controller or worker) or when it is itself terminated.
When the server dies on its own, it writes the server's exit code to EXIT at once (negative:
the signal that killed it), so any process of the run can tell the server died and how, and
exits with that code.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from types import FrameType

GRACE_S = 10.0
POLL_S = 0.05
"""How often the watchdog looks at the server, the watched pid and its stop flag: a stop
request (SIGTERM) is acted on within this time."""


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, finished but not yet reaped, counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def stop_group(pgid: int, grace_s: float = GRACE_S) -> None:
    """SIGTERM the process group, wait up to ``grace_s``, then SIGKILL what is left.

    Members that are the caller's children are reaped while waiting: a finished child stays
    in its group as a zombie until it is reaped, so the group would look alive for the whole
    grace period."""
    try:
        os.killpg(pgid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap_group(pgid)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        return


def _reap_group(pgid: int) -> None:
    """Reap the caller's finished children in group ``pgid`` (none: nothing to do)."""
    try:
        while os.waitpid(-pgid, os.WNOHANG)[0] != 0:
            pass
    except ChildProcessError:
        return


def _write(path: str, number: int) -> None:
    """Write ``number`` to ``path`` whole (a reader never sees a partial file)."""
    with open(path + ".tmp", "w", encoding="ascii") as out:
        out.write(str(number))
    os.replace(path + ".tmp", path)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pytest_infercheck.supervise")
    parser.add_argument("--watch", type=int, required=True, help="stop when this pid is gone")
    parser.add_argument("--log", required=True, help="the server's output goes here")
    parser.add_argument("--exit-file", help="the server's exit code, if it dies on its own")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    with open(args.log, "ab", buffering=0) as log:
        server = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    if args.exit_file:
        _write(args.exit_file + ".pid", server.pid)
    stopping = False

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    while True:
        code = server.poll()
        if code is not None:
            if args.exit_file:
                _write(args.exit_file, code)
            stop_group(server.pid, grace_s=1.0)  # children the server may have left
            return code
        if stopping or not alive(args.watch):
            stop_group(server.pid)
            server.wait()
            return 0
        time.sleep(POLL_S)


if __name__ == "__main__":
    sys.exit(main())
