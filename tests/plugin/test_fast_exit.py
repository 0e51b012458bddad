"""The quicker exit (:mod:`pytest_infercheck.fast_exit`): a process that collected a matrix
freezes the garbage collector's objects at exit; any other pytest run is left as it is.

The inner project's conftest registers its own ``atexit`` handler when pytest imports it,
before collection; ``atexit`` runs handlers last in, first out, so it runs after the
plugin's and writes what the collector holds frozen by then."""

from __future__ import annotations

import pytest

from .test_collection import MATRIX, SUITE

RECORD_FREEZE = """\
import atexit, gc, pathlib

atexit.register(
    lambda: pathlib.Path(__file__).with_name("frozen.txt").write_text(str(gc.get_freeze_count()))
)
"""


def frozen_at_exit(pytester: pytest.Pytester, *args: str) -> int:
    pytester.makeconftest(RECORD_FREEZE)
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    return int((pytester.path / "frozen.txt").read_text())


def test_a_run_that_collected_a_matrix_freezes_its_objects_at_exit(
    pytester: pytest.Pytester,
) -> None:
    pytester.makefile(".jsonl", arith=SUITE)
    pytester.makefile(".yaml", infercheck=MATRIX)
    for name in ("models/bf16", "models/q4", "models/q8"):
        (pytester.path / name).mkdir(parents=True)
    assert frozen_at_exit(pytester, "--collect-only", "-q") > 10_000


def test_a_run_without_a_matrix_keeps_the_collector_as_it_is(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="def test_nothing():\n    pass\n")
    assert frozen_at_exit(pytester, "-q") == 0
