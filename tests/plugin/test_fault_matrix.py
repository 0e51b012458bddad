"""The fault matrix on a real in-process model (mlx-lm, the tiny adder in bf16): every kind
that runs in-process, each fault it can see, and the control that must pass.

One pytester run per kind (in-process), covering all its faults: the matrix has the control
check on ``local`` and one check per fault on the same engine wrapped by
``pytest_infercheck_wrap_backend`` (``faulty-<fault>`` or ``flaky-<fault>``, see
:mod:`tests.faults`). The expected verdicts are :data:`tests.faults.EXPECTED`. The server
kinds (stream-parity, endpoint-parity, cache-pollution) and the HTTP fault (an empty body)
are in ``tests/integration/test_fault_matrix_servers.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fault_matrix import (
    CONTROL,
    RunCache,
    Verdict,
    assert_expected,
    fault_cases,
    mode_of,
    run_kind,
)
from tests.faults import IN_PROCESS_FAULTS, Fault, backend_name

KINDS = ("compare", "sweep", "diff", "golden", "determinism", "stress", "batch-invariance")

PENDING: dict[tuple[str, Fault], str] = {}
"""(kind, fault) pairs that pass silently, or fail without naming the fault, until the
fail-closed rules land: strict xfails (an XPASS says the rule landed: remove the pair)."""

RUNS = RunCache()


def _run(pytester: pytest.Pytester, bf16: Path, kind: str) -> dict[str, Verdict]:
    names = {fault: backend_name(fault, mode_of(kind)) for fault in IN_PROCESS_FAULTS}
    models = f"  adder: {{path: '{bf16}'}}\n"
    backends = "".join(f"  {n}: {{kind: mlx-lm}}\n" for n in ["local", *names.values()])
    return run_kind(pytester, kind, models, backends, "local", names, subprocess=False)


@pytest.mark.parametrize("kind", KINDS)
def test_no_fault_passes(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], kind: str
) -> None:
    found = RUNS.get(kind, lambda: _run(pytester, tiny_models["bf16"], kind))
    assert found[CONTROL].passed, found[CONTROL].message
    assert set(found) == {CONTROL, *(f.value for f in IN_PROCESS_FAULTS)}


@pytest.mark.parametrize(("kind", "fault"), fault_cases(KINDS, IN_PROCESS_FAULTS, PENDING))
def test_fault_fails_naming_it(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], kind: str, fault: Fault
) -> None:
    found = RUNS.get(kind, lambda: _run(pytester, tiny_models["bf16"], kind))
    assert_expected(kind, fault, found[fault.value], top_k=False)  # mlx-lm: chosen only
