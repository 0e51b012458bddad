"""The fault matrix on a real llama-server (the tiny adder's f32 GGUF): every kind, each fault
it can see, and the control that must pass.

One pytest subprocess per kind covering all its faults (a subprocess: the proxy below lives
in this process and uses httpx, which an in-process pytester run would unload). The
matrix's backends all attach to one llama-server: ``llama`` (the control, and the faithful
side of the comparisons), the same server wrapped by ``pytest_infercheck_wrap_backend`` for
each in-process fault (``faulty-<fault>`` / ``flaky-<fault>``, see :mod:`tests.faults`), and
the server behind a :class:`~tests.faulty_proxy.FaultyProxy` that answers every generation
request with HTTP 200 and an empty body (``...-empty-body``). The expected verdicts are
:data:`tests.faults.EXPECTED`; the in-process model's are in
``tests/plugin/test_fault_matrix.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

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
from tests.faults import Fault, backend_name
from tests.faulty_proxy import Fault as ProxyFault
from tests.faulty_proxy import FaultyProxy

COMPARISONS = ("compare", "sweep", "diff", "golden")
SELF_KINDS = (
    "determinism",
    "stress",
    "batch-invariance",
    "stream-parity",
    "endpoint-parity",
    "cache-pollution",
)
KINDS = COMPARISONS + SELF_KINDS
FAULTS = tuple(Fault)

PENDING: dict[tuple[str, Fault], str] = {}
"""(kind, fault) pairs that pass silently, or fail without naming the fault, until the
fail-closed rules land: strict xfails (an XPASS says the rule landed: remove the pair)."""

RUNS = RunCache()


@pytest.fixture(scope="module")
def empty_body_url(llama_url: str) -> Iterator[str]:
    """The llama-server behind a proxy that answers every generation request with HTTP 200
    and an empty body (other requests, e.g. ``/health`` and ``/tokenize``, pass)."""
    with FaultyProxy(llama_url, ProxyFault(perturb_every=1, empty_body=True)) as proxy:
        yield proxy.url


def _run(
    pytester: pytest.Pytester, adder: str, llama_url: str, empty_body_url: str, kind: str
) -> dict[str, Verdict]:
    names = {fault: backend_name(fault, mode_of(kind)) for fault in FAULTS}
    models = f"  adder: {adder}\n"
    backends = f"  llama: {{kind: llama-server, url: '{llama_url}'}}\n" + "".join(
        f"  {name}: {{kind: llama-server, url: "
        f"'{empty_body_url if fault is Fault.EMPTY_BODY else llama_url}'}}\n"
        for fault, name in names.items()
    )
    return run_kind(pytester, kind, models, backends, "llama", names, subprocess=True)


@pytest.mark.parametrize("kind", KINDS)
def test_no_fault_passes(
    pytester: pytest.Pytester, adder: str, llama_url: str, empty_body_url: str, kind: str
) -> None:
    found = RUNS.get(kind, lambda: _run(pytester, adder, llama_url, empty_body_url, kind))
    assert found[CONTROL].passed, found[CONTROL].message
    assert set(found) == {CONTROL, *(f.value for f in FAULTS)}


@pytest.mark.parametrize(("kind", "fault"), fault_cases(KINDS, FAULTS, PENDING))
def test_fault_fails_naming_it(
    pytester: pytest.Pytester,
    adder: str,
    llama_url: str,
    empty_body_url: str,
    kind: str,
    fault: Fault,
) -> None:
    found = RUNS.get(kind, lambda: _run(pytester, adder, llama_url, empty_body_url, kind))
    assert_expected(kind, fault, found[fault.value], top_k=True)  # llama-server: top-k
