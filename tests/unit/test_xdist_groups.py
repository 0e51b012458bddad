"""The integration tests' worker groups (``tests/integration/xdist_groups.py``) hold under the
README's test command (``-n 2 --dist loadgroup``): with pytest 9.2, pytest-xdist 3.8's own
suffix no longer reached the node id and every group was scattered over the workers."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from tests.integration.xdist_groups import (
    LLAMA_SERVER_FLAVOUR,
    grouped_id,
    llama_server_built,
    start_order,
)

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """\
import os
from pathlib import Path

import pytest
from tests.integration.xdist_groups import assign_groups

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    unbuilt = frozenset(os.environ.get("UNBUILT", "").split())
    assign_groups(config, items, root=Path(__file__).parent / "integration", unbuilt=unbuilt)

@pytest.fixture
def llama_server_bin():
    return "a llama-server"

@pytest.fixture
def vllm_qwen2():
    return "a session vLLM"

@pytest.fixture(scope="session")
def quickstart_run():
    made = Path(os.environ["QUICKSTART_MADE"])
    (made / str(len(list(made.iterdir())))).touch()  # one file per worker that made it
    return made
"""
QUICKSTART = """\
import pytest
@pytest.mark.parametrize("i", range(6))
def test_on_the_quickstart(quickstart_run, i):
    pass
"""
SHARED = """\
import pytest
@pytest.mark.parametrize("i", range(4))
def test_on_the_session_vllm(vllm_qwen2, i):
    pass
"""
OWN = """\
import pytest
pytestmark = pytest.mark.xdist_group("vllm")
@pytest.mark.parametrize("i", range(4))
def test_on_its_own_vllm(i):
    pass
"""
LLAMA = """\
import pytest
@pytest.mark.parametrize("i", range(2))
def test_on_llama(llama_server_bin, i):
    pass
"""
SHARED_LLAMA = """\
def test_on_the_session_vllm_and_llama(vllm_qwen2, llama_server_bin):
    pass
"""
PLAIN = """\
import pytest
@pytest.mark.parametrize("i", range(4))
def test_plain(i):
    pass
"""


def test_each_group_runs_on_one_worker(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    made = pytester.path / "quickstart-made"
    made.mkdir()
    monkeypatch.setenv("QUICKSTART_MADE", str(made))
    _make_suite(pytester)
    result = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-v")
    result.assert_outcomes(passed=48)
    workers: dict[str, set[str]] = defaultdict(set)
    modules: dict[str, set[str]] = defaultdict(set)
    for worker, module, group in re.findall(
        r"\[(gw\d)\] \[ *\d+%\] PASSED (?:integration/)?(test_\w+)\.py::\S+@([\w-]+)",
        result.stdout.str(),
    ):
        workers[group].add(worker)
        modules[group].add(module)
    assert dict(modules) == {
        "vllm": {"test_shared_a", "test_shared_b"},
        "vllm-own": {"test_own_c", "test_own_d"},
        "test_stress_servers": {"test_stress_servers"},
        "test_plain_e": {"test_plain_e"},
        "test_plain_f": {"test_plain_f"},
        "test_plain_g": {"test_plain_g"},
        "quickstart": {"test_b_quickstart", "test_c_quickstart"},
    }
    assert all(len(ran_on) == 1 for ran_on in workers.values()), dict(workers)
    assert len(list(made.iterdir())) == 1  # the session fixture: made once
    assert len(set().union(*workers.values())) == 2  # and the groups still use both workers


def _make_suite(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(CONFTEST)
    modules = {
        "test_shared_a": SHARED, "test_shared_b": SHARED, "test_own_c": OWN, "test_own_d": OWN,
        "test_plain_e": PLAIN, "test_plain_f": PLAIN, "test_plain_g": PLAIN,
        "test_stress_servers": PLAIN,  # one of LONG_MODULES
    }  # fmt: skip
    (pytester.path / "integration").mkdir()
    for name, text in modules.items():
        (pytester.path / "integration" / f"{name}.py").write_text(text)
    (pytester.path / "test_a_unit.py").write_text(PLAIN)
    (pytester.path / "test_b_quickstart.py").write_text(QUICKSTART)
    (pytester.path / "test_c_quickstart.py").write_text(QUICKSTART)


def _collected_modules(pytester: pytest.Pytester) -> list[str]:
    """The suite's modules in collection order (``--collect-only``)."""
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    modules: list[str] = []
    for line in result.stdout.lines:
        module = line.split("::")[0].removeprefix("integration/")
        if "::" in line and module not in modules:
            modules.append(module)
    return modules


def test_the_vllm_groups_start_first_then_the_long_modules_and_other_tests_last(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    _make_suite(pytester)
    modules = _collected_modules(pytester)
    assert modules == [
        "test_shared_a.py", "test_shared_b.py", "test_own_c.py", "test_own_d.py",
        "test_stress_servers.py", "test_plain_e.py", "test_plain_f.py", "test_plain_g.py",
        "test_a_unit.py", "test_b_quickstart.py", "test_c_quickstart.py",
    ]  # fmt: skip


@pytest.mark.parametrize("unbuilt", ["", "llama_server_bin"])
def test_while_llama_server_is_built_its_modules_start_after_the_others(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, unbuilt: str
) -> None:
    """Cold: the modules needing llama-server go after the others of their tier (the vLLM
    chain, the other integration modules); built: the usual order."""
    monkeypatch.setenv("PYTHONPATH", str(REPO))
    monkeypatch.setenv("UNBUILT", unbuilt)
    _make_suite(pytester)
    for name, text in {"test_shared_0": SHARED_LLAMA, "test_llama_0": LLAMA}.items():
        (pytester.path / "integration" / f"{name}.py").write_text(text)
    modules = _collected_modules(pytester)
    if unbuilt:
        assert modules == [
            "test_shared_a.py", "test_shared_b.py", "test_shared_0.py", "test_own_c.py",
            "test_own_d.py", "test_stress_servers.py", "test_plain_e.py", "test_plain_f.py",
            "test_plain_g.py", "test_llama_0.py", "test_a_unit.py", "test_b_quickstart.py",
            "test_c_quickstart.py",
        ]  # fmt: skip
    else:
        assert modules == [
            "test_shared_0.py", "test_shared_a.py", "test_shared_b.py", "test_own_c.py",
            "test_own_d.py", "test_stress_servers.py", "test_llama_0.py", "test_plain_e.py",
            "test_plain_f.py", "test_plain_g.py", "test_a_unit.py", "test_b_quickstart.py",
            "test_c_quickstart.py",
        ]  # fmt: skip


def test_llama_server_built_reads_the_build_scripts_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERCHECK_CACHE", str(tmp_path))
    monkeypatch.delenv("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", raising=False)
    assert not llama_server_built()
    old = tmp_path / "llama-server" / "0.3.36" / "llama-server"  # before flavours: -O3 glue
    old.parent.mkdir(parents=True)
    old.write_text("#!/bin/sh\n")
    old.chmod(0o755)
    assert not llama_server_built()
    binary = tmp_path / "llama-server" / f"0.3.36-{LLAMA_SERVER_FLAVOUR}" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    assert not llama_server_built()  # not executable
    binary.chmod(0o755)
    assert llama_server_built()
    monkeypatch.setenv("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", "0.3.37")
    assert not llama_server_built()
    script = (REPO / "scripts" / "build_llama_server.sh").read_text()
    assert 'VERSION="${INFERCHECK_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"' in script
    assert 'CACHE_ROOT="${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}"' in script
    assert f"FLAVOUR={LLAMA_SERVER_FLAVOUR} " in script
    assert 'DEST="$PARENT/$VERSION-$FLAVOUR"' in script and 'BIN="$DEST/llama-server"' in script


def test_start_order() -> None:
    assert start_order("vllm", True, True) < start_order("vllm-own", True)
    assert start_order("vllm", True) < start_order("vllm", True, True)
    assert start_order("test_stress_servers", True) < start_order("test_init", True, True)
    assert start_order("test_init", True, True) < start_order("", False)
    assert start_order("vllm", True) < start_order("vllm-own", True)
    assert start_order("vllm-own", True) < start_order("test_sampling_vllm_mlx", True)
    assert start_order("test_sampling_vllm_mlx", True) < start_order("test_stress_servers", True)
    assert start_order("test_stress_servers", True) < start_order("test_init", True)
    assert start_order("test_init", True) < start_order("", False)


def test_grouped_id_replaces_a_suffix_and_keeps_an_at_inside_brackets() -> None:
    assert grouped_id("t.py::test_x[1]", "vllm") == "t.py::test_x[1]@vllm"
    assert grouped_id("t.py::test_x[1]@vllm", "vllm-own") == "t.py::test_x[1]@vllm-own"
    assert grouped_id("t.py::test_x[a@b]", "g") == "t.py::test_x[a@b]@g"
    assert grouped_id("t.py::test_y", "g") == "t.py::test_y@g"
