"""Managed server processes: free port, start, health, logs, teardown; one per session.

A server is started by ``serve:`` (a command template with ``{model}`` and ``{port}``) under a
:mod:`.supervise` watchdog that watches the pytest controller, so no server outlives the run
however it ends. State lives in a folder shared by the controller and its xdist workers:
the first process that needs a server starts it behind a file lock and records it; others
attach to the recorded URL; the controller stops every recorded server once, at the end.

Each process's :class:`ServerPool` also remembers which server stands behind each target it
resolved (:meth:`ServerPool.url_for`), so that a failed request to a target can be reported as
its server's death, with the server's last log lines (:meth:`ServerPool.check_alive_for`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends.base import BackendError
from .supervise import alive, stop_group

if TYPE_CHECKING:
    from .config import BackendSpec

ADDRESS_IN_USE = ("address already in use", "couldn't bind", "could not bind", "errno 98")
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 30
HEALTH_POLL_FIRST_S = 0.01
HEALTH_POLL_MAX_S = 0.25


class ServerError(BackendError):
    """A managed server failed to start or died; the message carries its last log lines."""


@dataclass(frozen=True)
class ServerSpec:
    """What to run and how to tell it is ready."""

    command: str
    model: str
    env: tuple[tuple[str, str], ...] = ()
    health_path: str = "/health"
    startup_timeout_s: float = 180.0

    @property
    def key(self) -> str:
        return hashlib.sha256(repr((self.command, self.model, self.env)).encode()).hexdigest()[:12]


def server_spec(spec: BackendSpec, model: str) -> ServerSpec:
    """The managed-server description of a backend with ``serve:``."""
    assert spec.serve is not None
    return ServerSpec(
        command=spec.serve,
        model=model,
        env=tuple(sorted(spec.env.items())),
        health_path=spec.health_path,
        startup_timeout_s=spec.startup_timeout,
    )


@dataclass(frozen=True)
class ManagedServer:
    """The server behind a resolved target: the backend's name and what runs it."""

    name: str
    spec: ServerSpec


@dataclass
class ServerState:
    """What is recorded for a started server (JSON in the shared folder)."""

    url: str
    port: int
    supervisor_pid: int
    log: str
    command: list[str]


def health_poll_delays(
    first_s: float = HEALTH_POLL_FIRST_S, max_s: float = HEALTH_POLL_MAX_S
) -> Iterator[float]:
    """The pauses between health requests to a starting server: ``first_s``, then doubled
    each time up to ``max_s`` (0.01, 0.02, 0.04, ... 0.25, 0.25, ...). A server that is
    ready in a few tens of milliseconds is seen within ~that time, not a fixed 0.25 s later;
    a slow one is polled at most 4 times a second."""
    delay = first_s
    while True:
        yield delay
        delay = min(max_s, delay * 2)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def log_tail(path: Path | str, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class ServerPool:
    """Servers of one pytest run, shared through ``state_dir`` by controller and workers;
    in each process, also the server behind each target resolved there."""

    def __init__(self, state_dir: Path, controller_pid: int) -> None:
        self.state_dir = state_dir
        self.controller_pid = controller_pid
        state_dir.mkdir(parents=True, exist_ok=True)
        self._managed: dict[tuple[Any, ...], ManagedServer] = {}
        """The managed server behind each target key this process resolved."""

    def url_for(self, target_key: tuple[Any, ...], name: str, spec: ServerSpec) -> str:
        """The running server for ``spec`` (started on first request), remembered as the
        server of ``target_key`` (a :class:`~.generation_cache.ResolvedTarget` key) for
        :meth:`check_alive_for`; raises ServerError."""
        state_file = self.state_dir / f"{spec.key}.json"
        with _locked(self.state_dir / f"{spec.key}.lock"):
            if state_file.exists():
                state = ServerState(**json.loads(state_file.read_text()))
                if not alive(state.supervisor_pid):
                    raise _died(name, state)
            else:
                state = self._start(name, spec)
                tmp = state_file.with_suffix(".tmp")
                tmp.write_text(json.dumps(asdict(state)))
                tmp.replace(state_file)
        self._managed[target_key] = ManagedServer(name, spec)
        return state.url

    def check_alive_for(self, target_key: tuple[Any, ...]) -> None:
        """Raise ServerError with the log tail if the managed server behind ``target_key``
        has died (a target without one: nothing to check)."""
        managed = self._managed.get(target_key)
        if managed is None:
            return
        state_file = self.state_dir / f"{managed.spec.key}.json"
        if state_file.exists():
            state = ServerState(**json.loads(state_file.read_text()))
            if not alive(state.supervisor_pid):
                raise _died(managed.name, state)

    def _start(self, name: str, spec: ServerSpec) -> ServerState:
        last_error = ""
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            log = self.state_dir / f"{name}-{spec.key}-{attempt}.log"
            command = shlex.split(spec.command.format(model=spec.model, port=port))
            env = {**os.environ, **dict(spec.env)}
            supervisor = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest_infercheck.supervise",
                    "--watch",
                    str(self.controller_pid),
                    "--log",
                    str(log),
                    "--",
                    *command,
                ],
                env=env,
                start_new_session=True,
                stdin=subprocess.DEVNULL,
            )
            url = f"http://127.0.0.1:{port}"
            try:
                self._wait_healthy(name, spec, url, supervisor, log)
            except ServerError as exc:
                stop_group(supervisor.pid, grace_s=2.0)
                supervisor.wait()
                last_error = str(exc)
                if not any(m in log_tail(log).lower() for m in ADDRESS_IN_USE):
                    raise
                continue  # the port was taken before the server bound it: another port
            return ServerState(url, port, supervisor.pid, str(log), command)
        raise ServerError(last_error)

    def _wait_healthy(
        self, name: str, spec: ServerSpec, url: str, process: subprocess.Popen[bytes], log: Path
    ) -> None:
        import httpx  # here: a run without managed servers need not import it

        deadline = time.monotonic() + spec.startup_timeout_s
        delays = health_poll_delays()
        while time.monotonic() < deadline:
            code = process.poll()
            if code is not None:
                raise ServerError(
                    f"server {name!r} exited with code {code} before it was healthy; "
                    f"last log lines of {log}:\n{log_tail(log)}"
                )
            try:
                response = httpx.get(url + spec.health_path, timeout=2.0)
                if response.status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(next(delays))
        raise ServerError(
            f"server {name!r} was not healthy after {spec.startup_timeout_s:g} s at "
            f"{url}{spec.health_path}; last log lines of {log}:\n{log_tail(log)}"
        )

    def stop_all(self) -> None:
        """Stop every server recorded in the folder (the controller, once, at the end): all
        are sent SIGTERM first, then waited for together (up to 15 s), so their shut-downs
        overlap instead of adding up."""
        states = [
            ServerState(**json.loads(f.read_text())) for f in sorted(self.state_dir.glob("*.json"))
        ]
        stopping = []
        for state in states:
            if alive(state.supervisor_pid):
                with suppress(ProcessLookupError):
                    os.kill(state.supervisor_pid, 15)
                    stopping.append(state.supervisor_pid)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            for pid in stopping:
                _reap(pid)
            if not any(alive(pid) for pid in stopping):
                break
            time.sleep(0.02)
        for state in states:
            _reap(state.supervisor_pid)
        for f in self.state_dir.glob("*.json"):
            f.unlink(missing_ok=True)


def _died(name: str, state: ServerState) -> ServerError:
    return ServerError(
        f"server {name!r} died during the run; last log lines:\n{log_tail(state.log)}"
    )


def _reap(pid: int) -> None:
    """Collect a finished child so it does not linger as a zombie (no-op for non-children)."""
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
