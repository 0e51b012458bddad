"""Degenerate output over HTTP: a real llama-server on the tiny adder, faithful, and behind
the faulty proxy's ``stutter`` mode (tests/faulty_proxy.py: every generated token of a
``/completion`` answer twice, the FP8 KV-cache bug's output).

The adder answers "abc" (greedy, 32 tokens) with 9 digits "999011090" and stops: stuttered,
that is 9 doubled pairs of 3 distinct digits, a stutter of 18 tokens from token 0 (the EOS
stays once, last, and is not counted; llama-server gives no token texts, so the ids show:
"9" is id 60). "12+34=" gives "46": 2 pairs, too short to be one. Determinism still
passes (every run is stuttered alike): only ``fail_on_degenerate: true`` fails the item, and
its violation names the stutter."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_at
from tests.plugin.conftest import INI

SUITE = (
    '{"id": "g1", "prompt": "abc", "max_tokens": 32}\n'
    '{"id": "g2", "prompt": "12+34=", "max_tokens": 32}\n'
)
STUTTER = (
    "stutter (every other token duplicated: '60 60 60 60'...) in run {run}: 18 of 18 tokens "
    "from token 0"
)


def _write(pytester: pytest.Pytester, adder: str, url: str, settings: str = "") -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", s=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck=(
            f"models:\n  adder: {adder}\nbackends:\n{llama_at(url, max_concurrency=1)}"
            f"suites: [s.jsonl]\n{settings}checks:\n"
            "  - determinism: {target: adder@llama, runs: 2}\n    name: det\n"
        ),
    )


def _degenerate(pytester: pytest.Pytester) -> dict[str, tuple[str, str]]:
    """item -> (outcome, infercheck_degenerate) from JUnit."""
    out = {}
    for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        outcome = "failed" if case.find("failure") is not None else "passed"
        out[str(case.get("name"))] = (outcome, str(props.get("infercheck_degenerate")))
    return out


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    # a subprocess: the proxy lives in this process and uses httpx
    return pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")


def test_a_faithful_server_has_no_degenerate_output(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    _write(pytester, adder, llama_url, "settings: {fail_on_degenerate: true}\n")
    result = _run(pytester)
    assert _degenerate(pytester) == {
        "g1": ("passed", "0"),
        "g2": ("passed", "0"),
        "aggregate": ("passed", "0"),
    }, result.stdout.str()
    result.stdout.fnmatch_lines(["degenerate: 0 of 4 generations"])


def test_a_stuttering_server_is_counted_and_fails_where_asked(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    with FaultyProxy(llama_url, Fault(perturb_every=1, stutter=True)) as proxy:
        _write(pytester, adder, proxy.url)
        counted = _run(pytester)
        assert proxy.altered == 4
        _write(pytester, adder, proxy.url, "settings: {fail_on_degenerate: true}\n")
        failing = _run(pytester)
    assert _degenerate(pytester) == {
        "g1": ("failed", "2"),
        "g2": ("passed", "0"),
        "aggregate": ("failed", "2"),  # it fails for its failed item g1
    }, failing.stdout.str()
    failing.stdout.fnmatch_lines(
        [
            f"*- degenerate output: {STUTTER.format(run=0)}",
            f"*- degenerate output: {STUTTER.format(run=1)}",
        ]
    )
    counted.assert_outcomes(passed=3)
    counted.stdout.fnmatch_lines(
        [
            "*determinism(det)::s::aggregate: degenerate: 2 of 4 generations (stutter 2): "
            f"g1: {STUTTER.format(run=0)}*"
        ]
    )
