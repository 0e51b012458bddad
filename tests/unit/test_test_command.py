"""scripts/test.sh (the README's test command, what CI runs) runs every test directory once, in
one pytest run on three workers, grouped so that a module, and the modules on the session's
vLLMs, each stay on one worker (tests/integration/xdist_groups.py)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

from conftest import REPO


def test_the_test_command_runs_every_test_directory_once() -> None:
    script = (REPO / "scripts" / "test.sh").read_text()
    options = r"(?:-n \d )?(?:--dist loadgroup )?(?:--no-loadscope-reorder )?"
    runs = re.findall(rf"-m pytest {options}((?:tests/\S+ ?)+)$", script, re.M)
    named = [d for run in runs for d in run.split()]
    found = sorted(
        str(path.parent.relative_to(REPO)) for path in (REPO / "tests").glob("*/test_*.py")
    )
    assert sorted(named) == sorted(set(named)), "a test directory runs twice"
    assert sorted({*found}) == sorted(named), "a test directory that scripts/test.sh misses"
    (integration,) = [
        line for line in script.splitlines() if "-m pytest" in line and "tests/integration" in line
    ]
    # real servers: without loadgroup, every worker would start the session's vLLMs and a
    # module's servers would start on both (tests/integration/conftest.py's groups)
    assert "-n 3 --dist loadgroup --no-loadscope-reorder tests/integration" in integration
    # without --no-loadscope-reorder pytest-xdist hands groups out by their number of tests,
    # not in xdist_groups.py's start order (a 340 s module of 3 tests started at minute 25)


def test_the_ci_runs_the_readme_commands() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    readme = (REPO / "README.md").read_text().splitlines()[:6]
    assert "bash scripts/demo.sh" in ci and "bash scripts/test.sh" in ci
    assert any(line.startswith("bash scripts/demo.sh") for line in readme)
    assert any(line.startswith("bash scripts/test.sh") for line in readme)
    assert Path(REPO / "scripts" / "test.sh").exists()


def test_the_servers_are_built_in_the_background_before_the_tests_run() -> None:
    """Cold CI: the llama-server build and the vLLM and vllm-mlx installs
    (``scripts/build_servers.sh``) start in the background, before lint and the first pytest
    run, and only for the whole suite (the fixtures run the same scripts, which wait on their
    lock); ``.ci/run`` starts them before the demo, with the system's python3 (the demo is
    creating ``.venv`` meanwhile)."""
    script = (REPO / "scripts" / "test.sh").read_text()
    lines = script.splitlines()
    started = next(i for i, line in enumerate(lines) if "bash scripts/build_servers.sh" in line)
    assert lines[started].rstrip().endswith("&")
    first_tool = next(i for i, line in enumerate(lines) if "/bin/ruff" in line)
    first_pytest = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert started < first_tool < first_pytest
    guard = max(i for i in range(started) if lines[i].startswith("if "))
    assert lines[guard] == 'if [ "$#" -eq 0 ]; then'  # not for a run of chosen tests
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    early = next(i for i, line in enumerate(ci) if "bash scripts/build_servers.sh" in line)
    assert ci[early].startswith("PYTHON=python3 ") and ci[early].rstrip().endswith("&")
    assert early < ci.index("bash scripts/demo.sh") < ci.index("bash scripts/test.sh")


SCRIPTS = ("build_llama_server.sh", "install_vllm.sh", "install_vllm_mlx.sh")


def _stub_repo(tmp_path: Path, body: str) -> Path:
    """A copy of ``scripts/build_servers.sh`` beside stub server scripts running ``body``."""
    scripts = tmp_path / "repo" / "scripts"
    scripts.mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "build_servers.sh", scripts)
    for name in SCRIPTS:
        (scripts / name).write_text(body.replace("NAME", name))
    return scripts / "build_servers.sh"


def test_build_servers_runs_the_three_at_once_and_logs_each(tmp_path: Path) -> None:
    """Each script runs once, beside the others (each waits until all three have started),
    its output in its own log; a failing one is only logged: the wrapper exits 0."""
    marks = tmp_path / "marks"
    marks.mkdir()
    body = (
        f"touch {marks}/NAME\n"
        f"for i in $(seq 100); do [ $(ls {marks} | wc -l) -eq 3 ] && break; sleep 0.05; done\n"
        f"[ $(ls {marks} | wc -l) -eq 3 ] || {{ echo NAME ran alone; exit 7; }}\n"
        "echo NAME says hi\n"
        "[ NAME = install_vllm.sh ] && exit 3\nexit 0\n"
    )
    wrapper = _stub_repo(tmp_path, body)
    logs = tmp_path / "logs"
    done = subprocess.run(["bash", str(wrapper), str(logs)], capture_output=True, timeout=60)
    assert done.returncode == 0
    assert sorted(p.name for p in marks.iterdir()) == sorted(SCRIPTS)
    for name in SCRIPTS:
        assert (logs / f"{name}.log").read_text() == f"{name} says hi\n"


def test_build_servers_stops_the_three_when_stopped(tmp_path: Path) -> None:
    """TERM to the wrapper (test.sh's and .ci/run's exit trap) stops every script it runs."""
    pids = tmp_path / "pids"
    pids.mkdir()
    wrapper = _stub_repo(tmp_path, f"echo $$ > {pids}/NAME\nsleep 60 & wait\n")
    running = subprocess.Popen(["bash", str(wrapper), str(tmp_path / "logs")])
    deadline = time.monotonic() + 30
    while len(list(pids.iterdir())) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    started = [int(p.read_text()) for p in pids.iterdir()]
    assert len(started) == 3
    running.send_signal(signal.SIGTERM)
    assert running.wait(timeout=30) == 143
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in started) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in started if _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    return state != "Z"
