"""Managed server processes: free port, start, health, logs, teardown; one per session.

A server is started by ``serve:`` (a command template: ``{model}`` and ``{port}`` are filled
in, every other brace is passed as it is, see :func:`fill_command`) under a :mod:`.supervise`
watchdog that watches the pytest controller, so no server outlives the run however it ends.
State lives in a folder shared by the controller and its xdist workers, per server (its
:attr:`ServerSpec.key`) under a file lock:

- ``KEY.json``: the running server (:class:`ServerState`), written by the process that
  started it; others attach to the recorded URL;
- ``KEY.failed``: why it failed to start: it is not started again in this run, and every
  item that needs it fails with that first failure (its last log lines);
- ``KEY.stopped``: stopped because no remaining item needed it (:meth:`ServerPool.stop`);
- ``NAME-KEY-ATTEMPT.log`` and ``.exit``: its output, and its exit code, written by the
  watchdog when the server dies on its own.

The controller stops every recorded server once, at the end (:meth:`ServerPool.stop_all`).
Each process's :class:`ServerPool` also remembers which server stands behind each target it
resolved (:meth:`ServerPool.url_for`), so that a failed request to a target is reported as
its server's death, with its exit code and last log lines (:meth:`ServerPool.check_alive_for`),
and a connection error is not retried against a dead server (:meth:`ServerPool.watching`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .backends.base import BackendError
from .backends.serve_command import PLACEHOLDERS as PLACEHOLDERS
from .backends.serve_command import fill_command as fill_command
from .backends.serve_command import serve_problems as serve_problems
from .backends.spec import ServedSpec
from .supervise import alive, stop_group

if TYPE_CHECKING:
    from .backends.spec import BackendSpec

ADDRESS_IN_USE = ("address already in use", "couldn't bind", "could not bind", "errno 98")
PORT_ATTEMPTS = 3
LOG_TAIL_LINES = 30
HEALTH_POLL_FIRST_S = 0.01
HEALTH_POLL_MAX_S = 0.25
STOP_WAIT_S = 15.0
EXIT_CODE_WAIT_S = 1.0
"""How long a dead server's exit code is waited for (its watchdog polls it every 0.05 s)."""
"""How long a stop waits for a watchdog (which gives its server 10 s after SIGTERM)."""
ANY = "*"
"""In the counts of finished items: an item that may have used any server."""


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
    assert isinstance(spec, ServedSpec) and spec.serve is not None
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

    name: str
    url: str
    port: int
    supervisor_pid: int
    log: str
    command: list[str]
    startup_s: float
    """From the start of the command to its first healthy answer."""
    server_pid: int | None = None
    """The server's own pid (its process group), written by the watchdog."""

    @property
    def exit_file(self) -> Path:
        """Where the watchdog writes the server's exit code when it dies on its own."""
        return exit_file_of(Path(self.log))

    def dead(self) -> bool:
        """The server died: its exit code is written, or it or its watchdog is gone."""
        return (
            self.exit_file.exists()
            or not alive(self.supervisor_pid)
            or (self.server_pid is not None and not alive(self.server_pid))
        )


@dataclass(frozen=True)
class Started:
    """A server this process started: shown on the item that needed it first."""

    name: str
    startup_s: float
    log: str


def exit_file_of(log: Path) -> Path:
    return log.with_suffix(".exit")


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


EXCEPTION_LINE = re.compile(r"\b[A-Z]\w*(?:Error|Exception)\b: ")
"""A Python exception's message in a log line (``TypeError: 'function' object is not
subscriptable``), whatever prefix a server's logger puts before it."""
EARLIER_ERRORS = 3


def log_tail(path: Path | str, lines: int = LOG_TAIL_LINES) -> str:
    """The log's last ``lines`` lines, after the last :data:`EARLIER_ERRORS` distinct
    exception messages from before them: a server that dies often logs its cause, then a
    screen of shutdown noise (vLLM: the worker's ``TypeError``, then its process manager)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "(no log)"
    all_lines = text.splitlines()
    tail = all_lines[-lines:]
    earlier = list(
        dict.fromkeys(line for line in all_lines[:-lines] if EXCEPTION_LINE.search(line))
    )
    if not earlier:
        return "\n".join(tail) or "(empty log)"
    head = ["(errors earlier in the log)", *earlier[-EARLIER_ERRORS:], "(last lines)"]
    return "\n".join([*head, *tail])


def exit_description(code: int | None) -> str:
    """``code 3``, ``code -9, killed by SIGKILL``, or ``code unknown``."""
    if code is None:
        return "code unknown"
    if code < 0:
        with suppress(ValueError):
            return f"code {code}, killed by {signal.Signals(-code).name}"
    return f"code {code}"


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
        self._started: list[Started] = []
        """Servers this process started since :meth:`take_started` was last called."""

    def _path(self, key: str, suffix: str) -> Path:
        return self.state_dir / f"{key}{suffix}"

    def _state(self, key: str) -> ServerState | None:
        path = self._path(key, ".json")
        if not path.exists():
            return None
        return ServerState(**json.loads(path.read_text()))

    def url_for(self, target_key: tuple[Any, ...], name: str, spec: ServerSpec) -> str:
        """The running server for ``spec`` (started on first request), remembered as the
        server of ``target_key`` (a :class:`~.generation_cache.ResolvedTarget` key) for
        :meth:`check_alive_for`; raises ServerError, and again with the same message for
        every later request of the run if it failed to start (it is started once)."""
        key = spec.key
        with _locked(self._path(key, ".lock")):
            failed = self._path(key, ".failed")
            if failed.exists():
                raise ServerError(
                    failed.read_text(encoding="utf-8") + "\n(failed to start earlier in "
                    "this run: not started again)"
                )
            state = self._state(key)
            stopped = self._path(key, ".stopped")
            if state is not None and not stopped.exists():
                self._raise_if_dead(state)
            else:
                try:
                    state = self._start(name, spec)
                except ServerError as exc:
                    failed.write_text(str(exc), encoding="utf-8")
                    raise
                self._started.append(Started(name, state.startup_s, state.log))
                tmp = self._path(key, ".tmp")
                tmp.write_text(json.dumps(asdict(state)))
                tmp.replace(self._path(key, ".json"))
                stopped.unlink(missing_ok=True)
        self._managed[target_key] = ManagedServer(name, spec)
        return state.url

    def take_started(self) -> list[Started]:
        """The servers this process started since the last call (the item that was running
        shows how long each took)."""
        started, self._started = self._started, []
        return started

    def manages(self, target_key: tuple[Any, ...]) -> bool:
        """Whether a managed server (started by this pool) is behind ``target_key``."""
        return target_key in self._managed

    def check_alive_for(self, target_key: tuple[Any, ...]) -> None:
        """Raise ServerError with the exit code and log tail if the managed server behind
        ``target_key`` has died (a target without one: nothing to check)."""
        managed = self._managed.get(target_key)
        if managed is None:
            return
        state = self._state(managed.spec.key)
        if state is None:
            return
        if self._path(managed.spec.key, ".stopped").exists():
            raise ServerError(
                f"server {state.name!r} was stopped: no remaining item of this run was "
                "expected to need it"
            )
        self._raise_if_dead(state)

    def watching(self, target_key: tuple[Any, ...]) -> AbstractContextManager[None]:
        """A context in which an HTTP request that cannot connect first asks whether the
        server behind ``target_key`` is alive, and fails at once with its death instead of
        being retried (see :func:`~.backends.http.liveness_check`)."""
        if target_key not in self._managed:
            return nullcontext()
        from .backends.http import liveness_check  # httpx: only runs with servers load it

        return liveness_check(lambda: self.check_alive_for(target_key))

    def _raise_if_dead(self, state: ServerState) -> None:
        """Raise its death if the server is dead (:meth:`ServerState.dead`), with its exit
        code (waiting up to :data:`EXIT_CODE_WAIT_S` for its watchdog, which polls it, to
        write it)."""
        if state.dead():
            code = _read_int(state.exit_file, wait_s=EXIT_CODE_WAIT_S)
            raise ServerError(
                f"server {state.name!r} died (exit {exit_description(code)}); last log lines of "
                f"{state.log}:\n{log_tail(state.log)}"
            )

    def stop(self, key: str) -> bool:
        """Stop the server of ``key`` now (no remaining item needs it), waiting until it is
        gone so its memory is free for the next one; True if it was running."""
        with _locked(self._path(key, ".lock")):
            state = self._state(key)
            stopped = self._path(key, ".stopped")
            if state is None or stopped.exists():
                return False
            stopped.write_text(str(os.getpid()))
            running = alive(state.supervisor_pid)
            if running:
                self._stop_and_wait([state.supervisor_pid])
            return running

    def finished_item(self, keys: Sequence[str], needed: Mapping[str, int]) -> list[str]:
        """Count one more finished item for each of ``keys`` (the servers an item may have
        used, or ``"*"`` for an item that may have used any), in the run's counts shared by
        every process; then stop each server of ``keys`` (every server, after a ``"*"``
        item) whose ``needed`` items are all finished, as are all ``"*"`` items. Returns the
        keys of the servers stopped."""
        with _locked(self.state_dir / "finished.lock"):
            path = self.state_dir / "finished.counts"
            done: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
            for key in keys:
                done[key] = done.get(key, 0) + 1
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(done))
            tmp.replace(path)
        if done.get(ANY, 0) < needed.get(ANY, 0):
            return []
        candidates = needed if ANY in keys else keys
        finished = [k for k in candidates if k != ANY and done.get(k, 0) >= needed.get(k, 0)]
        return [key for key in finished if self.stop(key)]

    def _start(self, name: str, spec: ServerSpec) -> ServerState:
        last_error = ""
        for attempt in range(PORT_ATTEMPTS):
            port = free_port()
            log = self.state_dir / f"{name}-{spec.key}-{attempt}.log"
            command = fill_command(spec.command, spec.model, port)
            env = {**os.environ, **dict(spec.env)}
            started = time.monotonic()
            supervisor = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest_infercheck.supervise",
                    "--watch",
                    str(self.controller_pid),
                    "--log",
                    str(log),
                    "--exit-file",
                    str(exit_file_of(log)),
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
            startup_s = time.monotonic() - started
            server_pid = _read_int(Path(f"{exit_file_of(log)}.pid"))
            return ServerState(
                name, url, port, supervisor.pid, str(log), command, startup_s, server_pid
            )
        raise ServerError(last_error)

    def _wait_healthy(
        self, name: str, spec: ServerSpec, url: str, process: subprocess.Popen[bytes], log: Path
    ) -> None:
        import httpx  # here: a run without managed servers need not import it

        deadline = time.monotonic() + spec.startup_timeout_s
        delays = health_poll_delays()
        while time.monotonic() < deadline:
            if process.poll() is not None:
                code = _read_int(exit_file_of(log))
                raise ServerError(
                    f"server {name!r} exited with {exit_description(code)} before it was "
                    f"healthy; last log lines of {log}:\n{log_tail(log)}"
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

    def states(self) -> list[ServerState]:
        """Every server started in this run (running, stopped or dead)."""
        files = sorted(self.state_dir.glob("*.json"))
        return [ServerState(**json.loads(f.read_text())) for f in files]

    def had_failures(self) -> bool:
        """Whether a server failed to start or died on its own in this run."""
        return any(self.state_dir.glob("*.failed")) or any(self.state_dir.glob("*.exit"))

    def stop_all(self) -> None:
        """Stop every server recorded in the folder (the controller, once, at the end): all
        are sent SIGTERM first, then waited for together, so their shut-downs overlap instead
        of adding up."""
        self._stop_and_wait([s.supervisor_pid for s in self.states()])

    @staticmethod
    def _stop_and_wait(pids: list[int]) -> None:
        """SIGTERM each watchdog still running, then wait (up to :data:`STOP_WAIT_S`) for
        all of them, reaping those that are this process's children."""
        stopping = []
        for pid in pids:
            if alive(pid):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                    stopping.append(pid)
        deadline = time.monotonic() + STOP_WAIT_S
        while time.monotonic() < deadline:
            for pid in stopping:
                _reap(pid)
            if not any(alive(pid) for pid in stopping):
                break
            time.sleep(0.02)
        for pid in pids:
            _reap(pid)


def _read_int(path: Path, wait_s: float = 0.0) -> int | None:
    """The integer in ``path``, waiting up to ``wait_s`` for the file to appear; None if it
    does not."""
    deadline = time.monotonic() + wait_s
    while True:
        with suppress(OSError, ValueError):
            return int(path.read_text())
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.01)


def _reap(pid: int) -> None:
    """Collect a finished child so it does not linger as a zombie (no-op for non-children)."""
    with suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
