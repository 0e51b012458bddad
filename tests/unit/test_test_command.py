"""scripts/test.sh (the README's test command, what CI runs) runs every test directory once, in
one pytest run on three workers, grouped so that a module, and the modules on the session's
vLLMs, each stay on one worker (tests/integration/xdist_groups.py)."""

from __future__ import annotations

import re
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
    """Cold CI: the llama-server build and the vLLM and vllm-mlx installs start in the
    background, before lint and the first pytest run, and only for the whole suite (the
    fixtures run the same scripts, which wait on their lock)."""
    script = (REPO / "scripts" / "test.sh").read_text()
    lines = script.splitlines()
    started = next(i for i, line in enumerate(lines) if 'bash "scripts/$script"' in line)
    assert lines[started].rstrip().endswith("&")
    loop = next(line for line in lines[:started] if line.lstrip().startswith("for script in"))
    assert loop.split()[3:6] == ["build_llama_server.sh", "install_vllm.sh", "install_vllm_mlx.sh;"]
    first_tool = next(i for i, line in enumerate(lines) if "/bin/ruff" in line)
    first_pytest = next(i for i, line in enumerate(lines) if "-m pytest" in line)
    assert started < first_tool < first_pytest
    guard = max(i for i in range(started) if lines[i].startswith("if "))
    assert lines[guard] == 'if [ "$#" -eq 0 ]; then'  # not for a run of chosen tests
