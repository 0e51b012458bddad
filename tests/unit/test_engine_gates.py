"""The gates of determinism, batch-invariance and stress as declared (each with the measure
it reads), and a written logprob gate that the matrix already says can never be measured (a
backend written ``logprobs: false``): a collection error at the gate's line, not an item
that fails, or passes, later."""

from __future__ import annotations

import pytest

from pytest_infercheck.checks.registry import kind_named

MATRIX = """\
models: {a: {path: x}}
backends:
  srv: {kind: openai, url: 'http://127.0.0.1:1', logprobs: false}
  vmlx: {kind: vllm-mlx, url: 'http://127.0.0.1:1'}
  full: {kind: openai, url: 'http://127.0.0.1:1'}
suites: [r.jsonl]
checks:
%s"""


def collect(pytester: pytest.Pytester, checks: str) -> pytest.RunResult:
    """Collect the matrix with ``checks`` (no request is made: collection fails first)."""
    pytester.makefile(".jsonl", r='{"id": "p", "prompt": "1+1=", "max_tokens": 2}')
    pytester.makefile(".yaml", infercheck=MATRIX % checks)
    return pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")


def test_a_logprob_gate_on_a_backend_without_logprobs_is_an_error_at_its_line(
    pytester: pytest.Pytester,
) -> None:
    checks = (
        "  - determinism: {target: a@srv, runs: 2}\n"
        "    max_logprob_drift: 0.0\n"  # line 9
        "  - batch-invariance: a@vmlx\n"
        "    logprob_tolerance: 0.001\n"  # line 11
    )
    result = collect(pytester, checks)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    assert (
        "infercheck.yaml:9: checks[0].max_logprob_drift: not measured on any item: backend "
        "'srv' has logprobs: false"
    ) in out
    result = collect(pytester, checks.replace("a@srv", "a@full"))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert (
        "infercheck.yaml:11: checks[1].logprob_tolerance: not measured on any item: backend "
        "'vmlx' (vllm-mlx) returns no logprobs"
    ) in result.stdout.str()


def test_the_same_checks_collect_where_logprobs_can_be_had_or_the_gate_is_not_written(
    pytester: pytest.Pytester,
) -> None:
    result = collect(
        pytester,
        "  - determinism: {target: a@full, runs: 2}\n    max_logprob_drift: 0.0\n"
        "  - batch-invariance: a@full\n    logprob_tolerance: 0.001\n"
        # not written: its default applies where logprobs are measured, and is not required
        "  - determinism: {target: a@srv, runs: 2}\n  - batch-invariance: a@vmlx\n",
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()


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
                ("logprob_tolerance", "logprob_diff", "item"),
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
