"""The gates of determinism, batch-invariance and stress as declared (each with the measure
it reads), and a written logprob gate that the matrix already says can never be measured (a
backend written ``logprobs: false``): a collection error at the gate's line, not an item
that fails, or passes, later."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.config import load_matrix
from pytest_infercheck.yamlpos import SourceError

MATRIX = """\
models: {a: {path: x}}
backends:
  srv: {kind: openai, url: 'http://127.0.0.1:1', logprobs: false}
  full: {kind: openai, url: 'http://127.0.0.1:1'}
suites: [r]
checks:
%s"""


def load(tmp_path: Path, checks: str) -> object:
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX % checks)
    return load_matrix(path)


def test_a_logprob_gate_on_a_backend_without_logprobs_is_an_error_at_its_line(
    tmp_path: Path,
) -> None:
    checks = (
        "  - determinism: {target: a@srv, runs: 2}\n"
        "    max_logprob_drift: 0.0\n"  # line 8
        "  - batch-invariance: a@srv\n"
        "    logprob_tolerance: 0.001\n"  # line 10
    )
    with pytest.raises(SourceError) as info:
        load(tmp_path, checks)
    text = str(info.value)
    assert (
        "infercheck.yaml:8: checks[0].max_logprob_drift: 0.0 cannot be judged: it is never "
        "measured: backend 'srv' has logprobs: false: no run exposes logprobs, so no drift "
        "among runs can be measured"
    ) in text
    assert (
        "infercheck.yaml:10: checks[1].logprob_tolerance: 0.001 cannot be judged: it is never "
        "measured: backend 'srv' has logprobs: false"
    ) in text


def test_the_same_checks_load_where_logprobs_can_be_had_or_the_gate_is_not_written(
    tmp_path: Path,
) -> None:
    load(
        tmp_path,
        "  - determinism: {target: a@full, runs: 2}\n    max_logprob_drift: 0.0\n"
        "  - batch-invariance: a@full\n    logprob_tolerance: 0.001\n"
        # not written: its default applies where logprobs are measured, and is not required
        "  - determinism: {target: a@srv, runs: 2}\n  - batch-invariance: a@srv\n",
    )


@pytest.mark.parametrize(
    ("kind", "gates"),
    [
        (
            "determinism",
            [
                ("max_error_rate", "error_rate", "item"),
                ("max_logprob_drift", "logprob_drift", "item"),
                ("min_determinism", "determinism_score", "suite"),
                ("max_error_rate", "error_rate", "suite"),
            ],
        ),
        ("batch-invariance", [("logprob_tolerance", "logprob_diff", "item")]),
        (
            "stress",
            [
                ("max_error_rate", "error_rate", "item"),
                ("min_consistency", "consistency", "item"),
                ("flips.max_rate", "<function>", "item"),
            ],
        ),
    ],
)
def test_every_threshold_that_gates_is_declared_with_its_measure(
    kind: str, gates: list[tuple[str, str, str]]
) -> None:
    found = kind_named(kind)
    assert found is not None
    declared = [
        (g.key, g.reads if isinstance(g.reads, str) else "<function>", g.scope)
        for g in found.spec.gates
    ]
    assert declared == gates
