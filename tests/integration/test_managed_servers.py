"""Managed servers for real: mlx_lm.server started and stopped by the plugin, no process left,
a server that fails to start, a server killed mid-session, one server for two xdist workers.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.supervise import alive
from tests.integration.served import backend, llama_flags, llama_serve
from tests.integration.waiting import wait_for
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl


def server_processes(marker: str) -> list[int]:
    """Pids of mlx_lm.server processes whose environment mentions ``marker`` (each test's
    servers get ``HF_HUB_CACHE`` inside its own folder)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "mlx_lm.server" in cmdline and "supervise" not in cmdline and marker in environ:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def serve_project(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> Any:
    """Write a matrix comparing in-process mlx-lm with a plugin-started mlx_lm.server."""
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    hub = pytester.path / "hub"
    hub.mkdir()

    def write(serve: str | None = None, extra_checks: str = "") -> None:
        command = serve or (
            f"{sys.executable} -m mlx_lm.server --model {{model}} --port {{port}} --host 127.0.0.1"
        )
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  bf16: {{path: '{tiny_models["bf16"]}'}}
backends:
  local: {{kind: mlx-lm}}
  srv:
    kind: openai
    chat: false
    logprobs: false  # mlx_lm.server 0.32.2's top-k is unsorted (test_mlx_server_logprobs.py)
    serve: "{command}"
    env: {{HF_HUB_CACHE: '{hub}'}}
    startup_timeout: 300  # a crash ends the wait at once; only a slow start waits
suites: [addition.jsonl]
checks:
  - compare: {{baseline: bf16@local, test: bf16@srv}}
    name: local-vs-server
    min_similarity: 1.0
{extra_checks}""",
        )

    return write


def test_server_started_used_and_stopped(pytester: pytest.Pytester, serve_project: Any) -> None:
    serve_project()
    result = pytester.runpytest_subprocess("-q", "-rA")
    outcomes = result.parseoutcomes()
    # Every item ran against the real server (no backend errors); mlx_lm.server returns text
    # only here (no token ids), so the comparison is on text and answers.
    # The raw prompt is sent as the exact string of the baseline's ids ("<s>12+34="), so the
    # server, same bf16 weights, answers as mlx-lm does: every item passes.
    assert outcomes == {"passed": 9}, result.stdout.str()
    result.stdout.no_fnmatch_line("*backend error*")
    assert server_processes(pytester.path.name) == []


def test_a_server_forked_by_its_serve_command_is_stopped_with_it(
    pytester: pytest.Pytester, llama_server_bin: Path, adder: str, tmp_path: Path
) -> None:
    """The serve command is a shell that starts the real server (llama-server) as its own
    child and waits, without ``exec``: the watchdog only ever started the shell, so the
    server is stopped only because the whole process group is. Both must be gone when the
    run ends."""
    pids = tmp_path / "pids"
    serve = llama_serve(llama_server_bin, llama_flags(slots=1, context=64))
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {adder}\nbackends:\n"
        + backend("srv", "llama-server", f"sh -c '{serve} & echo $$ $! > {pids}; wait'")
        + "suites: [addition.jsonl]\nchecks:\n  - determinism: {target: adder@srv, runs: 2}\n",
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 9}, result.stdout.str()  # the child served
    shell, child = (int(pid) for pid in pids.read_text().split())
    assert shell != child
    assert not alive(shell), "the serve command's shell outlived the run"
    assert not alive(child), "the server its shell forked outlived the run"


def test_server_that_fails_to_start_fails_its_items_with_the_log(
    pytester: pytest.Pytester, serve_project: Any
) -> None:
    crash = pytester.makepyfile(crash="print('bad flag --frobnicate')\nraise SystemExit(3)\n")
    serve_project(
        serve=f"{sys.executable} {crash} {{port}}",
        extra_checks="  - compare: {baseline: bf16@local, test: bf16@local}\n",
    )
    result = pytester.runpytest_subprocess("-q")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 9 and outcomes["passed"] == 9  # the in-process check goes on
    result.stdout.fnmatch_lines(["*server 'srv' exited with code 3 before it was healthy*"])
    result.stdout.fnmatch_lines(["*bad flag --frobnicate*"])


def test_server_killed_mid_session(pytester: pytest.Pytester, serve_project: Any) -> None:
    # The first check generates its whole suite up front (HTTP prefetch); the server is killed
    # after it, so the second check, on the same server with other prompts, finds it dead.
    serve_project(
        extra_checks="  - compare: {baseline: bf16@local, test: bf16@srv}\n    name: after\n"
        "    suites: [more.jsonl]\n"
    )
    pytester.makefile(".jsonl", more=suite_jsonl([("m01", "1+2=", "3"), ("m02", "3+4=", "7")]))
    pytester.makeconftest(
        """
import os, signal
from pathlib import Path

def pytest_runtest_teardown(item):
    if "local-vs-server" in item.nodeid and item.name == "aggregate":
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmd = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
                except OSError:
                    continue
                if "mlx_lm.server" in cmd and "supervise" not in cmd:
                    os.kill(int(entry.name), signal.SIGKILL)
"""
    )
    result = pytester.runpytest_subprocess("-q")
    result.stdout.fnmatch_lines(["*server 'srv' died (exit code -9, killed by SIGKILL)*"])
    result.stdout.re_match_lines([r".*compare\(after\)::more::m01 - backend error: server"])
    assert server_processes(pytester.path.name) == []


def test_two_xdist_workers_share_one_server(
    pytester: pytest.Pytester, serve_project: Any, tmp_path: Path
) -> None:
    starts = tmp_path / "starts"
    command = (
        f"sh -c 'echo started >> {starts}; exec {sys.executable} -m mlx_lm.server "
        f"--model $0 --port $1 --host 127.0.0.1' {{model}} {{port}}"
    )
    # Two checks -> two scopes, spread over the two workers, both against the server.
    serve_project(
        serve=command,
        extra_checks="  - compare: {baseline: bf16@local, test: bf16@srv}\n    name: second\n",
    )
    result = pytester.runpytest_subprocess("-q", "-n", "2")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) + outcomes.get("failed", 0) == 18, result.stdout.str()
    result.stdout.no_fnmatch_line("*backend error*")
    assert starts.read_text().splitlines() == ["started"]
    assert server_processes(pytester.path.name) == []


@pytest.mark.parametrize("signal_name", ["SIGKILL", "SIGINT", "SIGTERM"])
def test_no_orphan_when_pytest_is_killed_or_interrupted(
    pytester: pytest.Pytester, serve_project: Any, signal_name: str
) -> None:
    """pytest is stopped while its server runs (in the first item's teardown): killed
    (SIGKILL: nothing of pytest runs, the watchdog stops the server), interrupted (SIGINT: the
    run ends as after Ctrl-C, stopping its servers) or terminated (SIGTERM: Python's default
    action ends the process at once, the watchdog again). No server process is left.

    The inner run takes SIGINT as Ctrl-C whatever the test run was started with: started as
    a background job of a shell script (as test runs are, several at once, on a loaded
    machine), it inherited SIGINT ignored and never ended, and the test timed out after 60 s.
    Each wait is for the event, with a deadline stretched by the machine's load (an
    interrupted pytest's end-of-run work is a few CPU seconds: 6.6 s on a loaded machine,
    25.6 s with a fifth of a core), and the inner run waits for the signal where it slept a
    fixed 120 s."""
    serve_project()
    marker = pytester.path / "server-is-up"
    pytester.makeconftest(
        f"""
import os, signal, time
from pathlib import Path

# Ctrl-C as in a terminal: a run started in the background of a non-interactive shell (a CI
# step's "&") inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
signal.signal(signal.SIGINT, signal.default_int_handler)

def pytest_runtest_teardown(item):
    if item.name == "s01":
        Path({str(marker)!r}).write_text(str(os.getpid()))
        parent = os.getppid()
        while os.getppid() == parent:  # until the signal (or the test that runs us is gone)
            time.sleep(0.1)
"""
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=pytester.path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:

        def up() -> bool:
            assert process.poll() is None, "pytest ended before its server came up"
            return marker.exists()

        wait_for(up, 180, "the first item did not finish")
        assert server_processes(pytester.path.name), "the server should be running"
        process.send_signal(getattr(signal, signal_name))
        wait_for(lambda: process.poll() is not None, 60, f"pytest did not end on {signal_name}")
        if signal_name != "SIGINT":  # ended by the signal itself, nothing of pytest ran after
            assert process.returncode == -getattr(signal, signal_name)
        wait_for(lambda: not server_processes(pytester.path.name), 30, "a server outlived pytest")
    finally:
        if process.poll() is None:
            process.kill()
