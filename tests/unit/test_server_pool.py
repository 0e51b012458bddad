"""The server pool with real processes (``python -m http.server`` as a cheap server whose
``/`` answers 200): a failed start is not repeated, a death is named with its exit code, a
request that cannot connect to a dead server is not retried, and a server is stopped once
the items that need it, in every process, are finished."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import anyio  # noqa: F401
import httpcore  # noqa: F401
import pytest

from pytest_infercheck.backends.http import HttpClient, HttpError, HttpSettings, liveness_check
from pytest_infercheck.servers import ANY, ServerError, ServerPool, ServerSpec
from pytest_infercheck.supervise import alive

# httpx imports httpcore (and anyio) on first use; imported here, at collection, so that a
# pytester test that runs first cannot unload them (pytester removes the modules first
# imported during its test; httpx then meets a second copy's exception classes).
HTTP_SERVER = f"{sys.executable} -m http.server --bind 127.0.0.1 {{port}}"


def kill(pid: int) -> None:
    """SIGKILL ``pid`` and wait until it is gone (a kill is delivered, not done, on return)."""
    os.kill(pid, signal.SIGKILL)
    while alive(pid):
        time.sleep(0.005)


def spec(command: str = HTTP_SERVER, model: str = "m") -> ServerSpec:
    return ServerSpec(command=command, model=model, health_path="/", startup_timeout_s=30)


@pytest.fixture
def pool(tmp_path: Path) -> Iterator[ServerPool]:
    pool = ServerPool(tmp_path / "servers", os.getpid())
    yield pool
    pool.stop_all()


def test_a_failed_start_is_recorded_and_not_repeated(pool: ServerPool, tmp_path: Path) -> None:
    """Before: every request started the command again."""
    starts = tmp_path / "starts"
    crash = spec(f"sh -c 'echo started >> {starts}; echo bad flag --frobnicate; exit 3' {{port}}")
    with pytest.raises(ServerError) as first:
        pool.url_for(("t",), "srv", crash)
    assert "server 'srv' exited with code 3 before it was healthy" in str(first.value)
    assert "bad flag --frobnicate" in str(first.value)
    other_process = ServerPool(pool.state_dir, os.getpid())  # an xdist worker, say
    for asking in (pool, other_process):
        with pytest.raises(ServerError) as again:
            asking.url_for(("t",), "srv", crash)
        assert str(again.value).startswith(str(first.value))
        assert "not started again" in str(again.value)
    assert starts.read_text().splitlines() == ["started"]
    assert pool.had_failures()


def test_a_killed_server_is_named_dead_with_its_exit_code(pool: ServerPool) -> None:
    pool.url_for(("t",), "srv", spec())
    pool.check_alive_for(("t",))  # alive: nothing raised
    (state,) = pool.states()
    assert state.server_pid is not None and state.startup_s > 0
    kill(state.server_pid)
    with pytest.raises(ServerError, match=r"server 'srv' died \(exit code -9, killed by SIGKILL\)"):
        pool.check_alive_for(("t",))
    assert Path(state.log).with_suffix(".exit").read_text() == "-9"
    with pytest.raises(ServerError, match="died"):  # never started again in this run
        pool.url_for(("t",), "srv", spec())


def test_a_request_to_a_dead_server_is_not_retried(pool: ServerPool) -> None:
    """Before: a connection error was retried ``retries`` times with backoff."""
    url = pool.url_for(("t",), "srv", spec())
    (state,) = pool.states()
    assert state.server_pid is not None
    kill(state.server_pid)
    client = HttpClient("srv", HttpSettings(url, retries=4, backoff_s=0.001))
    checks: list[int] = []

    def check() -> None:
        checks.append(1)
        pool.check_alive_for(("t",))

    async def get() -> object:
        return await client.request("GET", "/")

    with liveness_check(check), pytest.raises(ServerError, match="died"):
        asyncio.run(get())
    assert checks == [1]  # asked once, after the first attempt: no retry
    with pytest.raises(HttpError, match="5 attempts"):  # without the check
        asyncio.run(get())


def test_a_server_stops_once_every_item_that_needs_it_is_finished(pool: ServerPool) -> None:
    first, second = spec(model="a"), spec(model="b")
    pool.url_for(("a",), "first", first)
    pool.url_for(("b",), "second", second)
    pids = {s.name: s.supervisor_pid for s in pool.states()}
    needed = {first.key: 2, second.key: 1, ANY: 1}
    worker = ServerPool(pool.state_dir, os.getpid())  # counts add up across processes
    assert pool.finished_item([first.key], needed) == []
    assert worker.finished_item([first.key, second.key], needed) == []  # an ANY item remains
    assert alive(pids["first"]) and alive(pids["second"])
    assert sorted(pool.finished_item([ANY], needed)) == sorted([first.key, second.key])
    assert not alive(pids["first"]) and not alive(pids["second"])
    with pytest.raises(ServerError, match="was stopped: no remaining item"):
        pool.check_alive_for(("a",))
    assert not pool.had_failures()  # a stop is not a death


def test_a_stopped_server_needed_again_is_started_again(pool: ServerPool) -> None:
    pool.url_for(("a",), "srv", spec())
    assert pool.stop(spec().key)
    url = pool.url_for(("a",), "srv", spec())
    pool.check_alive_for(("a",))
    assert url.startswith("http://127.0.0.1:")


def test_a_log_tail_keeps_the_exception_that_came_before_the_shutdown_noise(
    tmp_path: Path,
) -> None:
    """vLLM's shape: the worker's exception, then more than a tail of shutdown lines; the
    tail names the exception first (distinct lines, at most three), then the last lines."""
    from pytest_infercheck.servers import log_tail

    log = tmp_path / "server.log"
    cause = "(Worker pid=1) ERROR [x.py:1] TypeError: 'function' object is not subscriptable"
    lines = ["starting", cause, cause, "EngineDeadError: EngineCore encountered an issue"]
    lines += [f"shutdown {i}" for i in range(5)]
    log.write_text("\n".join(lines) + "\n")
    assert log_tail(log, lines=3).splitlines() == [
        "(errors earlier in the log)",
        cause,
        "EngineDeadError: EngineCore encountered an issue",
        "(last lines)",
        "shutdown 2",
        "shutdown 3",
        "shutdown 4",
    ]
    log.write_text("a\nb\n")
    assert log_tail(log, lines=3) == "a\nb"  # nothing earlier: the tail alone
