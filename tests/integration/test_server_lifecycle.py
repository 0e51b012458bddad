"""The life of plugin-started servers, against real llama-servers on the tiny adder (the same
code serves every kind: nothing here is llama-server specific but the command):

- a ``serve:`` command holding JSON reaches the server as written;
- a server that fails to start is started once per run, with or without xdist, and each of
  its items fails with that first failure's log lines;
- a server killed mid-run is named as dead, with its exit code, by stress and determinism
  alike (never a load failure), and its log is kept after the run, its folder printed;
- a passing run leaves no servers folder behind;
- of two servers in one session, the first is stopped before the second's items run; under
  xdist a server shared by two workers' checks is stopped only when both are done with it;
- the item that started a server shows how long it took;
- a pytest terminated (SIGTERM, as CI cancelling a job), in one process or as the controller
  of xdist workers, leaves neither its server nor its workers running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_infercheck.supervise import alive
from tests.integration.served import backend, llama_flags, llama_serve
from tests.integration.waiting import wait_for
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

FLAGS = llama_flags(slots=4, context=256)
PROMPTS = [("s01", "12+34=", "46"), ("s02", "50+25=", "75"), ("s03", "7+8=", "15")]


def write_project(pytester: pytest.Pytester, models: str, backends: str, checks: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {models}\nbackends:\n{backends}"
        f"suites: [addition.jsonl]\nchecks:\n{checks}",
    )


def recording_pid(pid_file: Path, serve: str) -> str:
    """``serve`` run by a shell that writes its pid to ``pid_file`` and then becomes the
    server (``exec``: the same pid)."""
    return f"sh -c 'echo $$ > {pid_file}; exec {serve}'"


def servers_folder(pytester: pytest.Pytester) -> list[Path]:
    """The servers folders left in the inner runs' base temporary folders."""
    return list(pytester.path.glob("runpytest-*/infercheck-servers"))


def test_a_serve_command_holding_json_reaches_the_server_as_written(
    pytester: pytest.Pytester, llama_server_bin: Path, adder: str, tmp_path: Path
) -> None:
    """Before: ``str.format`` read ``{"method": ...}`` as a field: KeyError on every item."""
    seen = tmp_path / "seen"
    config = '{"method": "ngram", "num_speculative_tokens": 3}'
    serve = llama_serve(llama_server_bin, FLAGS)
    backends = (
        "  srv:\n    kind: llama-server\n    serve: |-\n"
        f"      sh -c 'printf %s \"$0\" > {seen}; exec {serve}' '{config}'\n"
    )
    write_project(pytester, adder, backends, "  - determinism: {target: adder@srv, runs: 2}\n")
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly")
    assert result.parseoutcomes() == {"passed": 4}, result.stdout.str()
    assert seen.read_text() == config
    assert servers_folder(pytester) == []  # a passing run leaves nothing behind


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_server_that_fails_to_start_is_started_once(
    pytester: pytest.Pytester, adder: str, tmp_path: Path, workers: list[str]
) -> None:
    """Before: started again by every item (7 starts for 7 items); the failure's log lines
    are on every item, and the log is kept after the run."""
    starts = tmp_path / "starts"
    crash = f"sh -c 'echo started >> {starts}; echo error: unknown flag --frobnicate; exit 3'"
    checks = (
        "  - determinism: {target: adder@srv, runs: 2}\n    name: one\n"
        "  - determinism: {target: adder@srv, runs: 2}\n    name: two\n"
    )
    write_project(pytester, adder, backend("srv", "llama-server", f"{crash} {{port}}"), checks)
    # -rN: no short summary (under CI=true pytest prints its lines whole: each message twice)
    result = pytester.runpytest_subprocess("-q", "-rN", "-p", "no:randomly", *workers)
    assert result.parseoutcomes() == {"failed": 8}, result.stdout.str()
    assert starts.read_text().splitlines() == ["started"]
    out = result.stdout.str()
    assert out.count("server 'srv' exited with code 3 before it was healthy") == 8
    assert out.count("error: unknown flag --frobnicate") == 8
    # The first check's items are gathered together: the three of the gather that started
    # it carry the failure itself; every later item (its aggregate, the second check's four)
    # the failure and that it was not started again.
    assert out.count("not started again") == 5
    logs = re.findall(r"last log lines of (\S+\.log):", out)
    assert len(set(logs)) == 1 and "frobnicate" in Path(logs[0]).read_text()
    result.stdout.fnmatch_lines([f"server logs kept in {Path(logs[0]).parent}"])


def test_a_server_killed_mid_run_is_named_dead_by_stress_and_determinism(
    pytester: pytest.Pytester, llama_server_bin: Path, adder: str, tmp_path: Path
) -> None:
    """Before: stress retried the dead port and reported an error rate (ConnectError) as a
    load failure; the log named in the message was deleted at the end of the run."""
    pid_file = tmp_path / "pid"
    serve = recording_pid(pid_file, llama_serve(llama_server_bin, FLAGS))
    checks = (
        "  - stress: {target: adder@srv, levels: [1, 2, 4], repeats: 1}\n"
        "  - determinism: {target: adder@srv, runs: 2}\n"
    )
    write_project(pytester, adder, backend("srv", "llama-server", serve), checks)
    pytester.makeconftest(
        f"""
import os, signal
from pathlib import Path

def pytest_runtest_teardown(item):
    if item.name == "c1":
        os.kill(int(Path({str(pid_file)!r}).read_text()), signal.SIGKILL)
"""
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly")
    out = result.stdout.str()
    dead = r"server 'srv' died \(exit code -9, killed by SIGKILL\); last log lines of "
    for level in ["c2", "c4"]:  # the levels after the kill error with the death
        header = rf"_+ stress\(adder\)::addition::{level} _+"
        result.stdout.re_match_lines([header, f"backend error: {dead}"], consecutive=True)
    for prompt in ["s01", "s02", "s03"]:  # determinism's items error with it, as stress's
        header = rf"_+ determinism\(adder\)::addition::{prompt} _+"
        result.stdout.re_match_lines([header, f"backend error: {dead}"], consecutive=True)
    assert "ConnectError" not in out, out  # no level counted the dead port as load errors
    logs = set(re.findall(r"last log lines of (\S+\.log):", out))
    assert len(logs) == 1
    log = Path(logs.pop())
    assert "llama" in log.read_text() and log.with_suffix(".exit").read_text() == "-9"
    result.stdout.fnmatch_lines([f"server logs kept in {log.parent}"])


def test_the_first_server_stops_before_the_second_serves(
    pytester: pytest.Pytester, llama_server_bin: Path, adder: str, tmp_path: Path
) -> None:
    """Two servers, one check each: while the second check's items run, the first server
    (no remaining item needs it) is gone. Before: both lived to the end of the session."""
    first, second = tmp_path / "first.pid", tmp_path / "second.pid"
    seen = tmp_path / "seen"
    backends = backend(
        "srv1", "llama-server", recording_pid(first, llama_serve(llama_server_bin, FLAGS))
    ) + backend(
        "srv2",
        "llama-server",
        recording_pid(second, llama_serve(llama_server_bin, llama_flags(2, 128))),
    )
    checks = (
        "  - determinism: {target: adder@srv1, runs: 2}\n    name: first\n"
        "  - determinism: {target: adder@srv2, runs: 2}\n    name: second\n"
    )
    write_project(pytester, adder, backends, checks)
    pytester.makeconftest(
        f"""
from pathlib import Path
from pytest_infercheck.supervise import alive

def pytest_runtest_call(item):
    if "determinism(second)" in item.nodeid:
        pid = int(Path({str(first)!r}).read_text())
        with open({str(seen)!r}, "a") as out:
            out.write(f"{{item.name}} {{alive(pid)}}\\n")
"""
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:randomly", "-rA")
    assert result.parseoutcomes() == {"passed": 8}, result.stdout.str()
    assert seen.read_text().splitlines() == [
        "s01 False",
        "s02 False",
        "s03 False",
        "aggregate False",
    ]
    assert not alive(int(second.read_text()))
    # the item that started each server shows how long it took
    result.stdout.re_match_lines(
        [r".*infercheck servers.*", r"server 'srv1' started in \d+\.\d\d s \(log .*\.log\)"]
    )
    result.stdout.re_match_lines([r"server 'srv2' started in \d+\.\d\d s \(log .*\.log\)"])
    assert servers_folder(pytester) == []


def test_under_xdist_a_shared_server_stops_only_when_every_worker_is_done(
    pytester: pytest.Pytester, llama_server_bin: Path, adder: str, tmp_path: Path
) -> None:
    """A stress check (its levels spread over both workers, each needing the server when it
    runs) and a determinism check on one server, a third check on another server: the
    shared server is started once and serves every item to the end (a worker that stopped
    it when its own items were done would fail the other's levels with "was stopped")."""
    starts = tmp_path / "starts"
    serve = llama_serve(llama_server_bin, FLAGS)
    counted = f"sh -c 'echo started >> {starts}; exec {serve}'"
    backends = backend("srv", "llama-server", counted) + backend(
        "other", "llama-server", llama_serve(llama_server_bin, llama_flags(2, 128))
    )
    checks = (
        "  - stress: {target: adder@srv, levels: [1, 2, 3, 4, 5, 6], repeats: 1}\n"
        "  - determinism: {target: adder@srv, runs: 2}\n    name: two\n"
        "  - determinism: {target: adder@other, runs: 2}\n    name: three\n"
    )
    write_project(pytester, adder, backends, checks)
    result = pytester.runpytest_subprocess("-q", "-n", "2")
    assert result.parseoutcomes() == {"passed": 15}, result.stdout.str()
    assert starts.read_text().splitlines() == ["started"]


def children_of(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (a zombie counts as gone)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if stat[1] == str(pid) and stat[0] != "Z":
                found.append(int(entry.name))
    return found


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one-process", "xdist"])
def test_a_terminated_pytest_leaves_no_server_and_no_worker(
    pytester: pytest.Pytester,
    llama_server_bin: Path,
    adder: str,
    tmp_path: Path,
    workers: list[str],
) -> None:
    """SIGTERM (CI cancelling a job) ends Python at once: no ``finally``, no session finish,
    so only the watchdog, which watches the controller, stops the server. Under xdist the
    server is started by a worker, and the controller is what is terminated: the server
    goes with it, and so do the workers."""
    pid_file, marker = tmp_path / "server.pid", tmp_path / "up"
    serve = recording_pid(pid_file, llama_serve(llama_server_bin, FLAGS))
    checks = "  - determinism: {target: adder@srv, runs: 2}\n"
    write_project(pytester, adder, backend("srv", "llama-server", serve), checks)
    pytester.makeconftest(
        f"""
import os, time
from pathlib import Path

def pytest_runtest_teardown(item):
    if item.name == "s01":  # the server is up: hold the run here until the signal
        Path({str(marker)!r}).write_text(str(os.getpid()))
        parent = os.getppid()
        while os.getppid() == parent:  # a worker's parent is the controller
            time.sleep(0.1)
"""
    )
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *workers]
    process = subprocess.Popen(
        command, cwd=pytester.path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:

        def up() -> bool:
            assert process.poll() is None, "pytest ended before its server came up"
            return marker.exists()

        wait_for(up, 180, "the first item did not finish")
        server = int(pid_file.read_text())
        holder = int(marker.read_text())  # the process running the items: pytest or a worker
        assert alive(server)
        assert (holder == process.pid) is (not workers)
        workers_before = children_of(process.pid)
        process.send_signal(signal.SIGTERM)
        wait_for(lambda: process.poll() is not None, 30, "pytest did not end on SIGTERM")
        assert process.returncode == -signal.SIGTERM  # ended by the signal: nothing ran after
        wait_for(lambda: not alive(server), 30, "the server outlived pytest")
        for worker in workers_before:
            wait_for(lambda w=worker: not alive(w), 30, f"worker {worker} outlived pytest")
    finally:
        if process.poll() is None:
            process.kill()
        if pid_file.exists() and alive(server := int(pid_file.read_text())):
            os.kill(server, signal.SIGKILL)
