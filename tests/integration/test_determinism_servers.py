"""determinism and batch-invariance against real servers serving the tiny adder, passing on
faithful engines and failing on faulty ones.

- llama-server with 4 slots (``-np 4``; our backend sends ``cache_prompt: false``): the
  same tokens in every run and in every burst. Concurrent requests share decode batches, and
  their logprobs move by float32 steps (measured up to 4.2e-7), so ``max_logprob_drift``
  and ``logprob_tolerance`` are 1e-5 here, not 0.
- The faulty proxy (tests/faulty_proxy.py) in front of that llama-server: ``perturb_every``
  changes the last token of every Nth generation; requests are sent one at a time
  (``max_concurrency: 1``), so the Nth generations are known runs of known prompts and
  determinism must fail on exactly those prompts. ``perturb_when_concurrent`` changes
  every response that overlapped another: the prompt alone is intact, inside a burst it is
  not, so every batch-invariance item must fail.
- A prompt longer than a slot's context: a real HTTP 400 on every run, counted as failed
  runs (modal share 0, the suite's error rate gate fails).
- The same prompt with ``max_error_rate: 1.0``: every run of it failed, so nothing was
  judged: the item fails with the server's message (it used to pass).
- vllm-mlx, simple engine (one request at a time) and ``--continuous-batching``: identical
  text for the addition prompts (measured 0 changes in 2 x 540 determinism runs and 180
  needle trials at 8 in flight). The continuous-batching engine is not deterministic for
  ``<s>1+0=`` when copies of it are decoded together: alone it answers "1" (20/20), with 8 in
  flight "2" in 24/30 and 23/40 raw requests, and this check found 13, 16 and 11 of 40 runs
  differing from the modal output in three runs (the modal answer itself was "2" twice).
  A real engine finding, asserted as a failure with 40 runs (no run of it passed in 8).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import llama_at, llama_flags, llama_server, vllm_backends
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

DETERMINISM = """\
  - determinism: {target: adder@llama, runs: 6}
    name: det
    min_determinism: 1.0
    max_logprob_drift: 1.0e-5
"""
NEEDLE = """\
  - batch-invariance: {target: adder@llama, trials: 2, batch_size: 6, seed: 3}
    name: needle
    logprob_tolerance: 1.0e-5
"""


@pytest.fixture(scope="module")
def llama(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A real llama-server with 4 slots, started here so a proxy can sit in front of it."""
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, llama_flags(4, 256)) as url:
        yield url


def _write(
    pytester: pytest.Pytester, adder: str, backends: str, checks: str, suites: str = ""
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=(
            f"models:\n  adder: {adder}\n"
            f"backends:\n{backends}"
            f"suites: [addition.jsonl{suites}]\nchecks:\n{checks}"
        ),
    )


def _outcomes(pytester: pytest.Pytester) -> dict[str, dict[str, str]]:
    """``check::item`` -> ``{"outcome": passed|failed, property: value}`` from JUnit."""
    out = {}
    for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase"):
        # classname: infercheck.yaml.<check>.<suite>; a check name may contain dots.
        check = case.get("classname", "").removeprefix("infercheck.yaml.").rpartition(".")[0]
        failed = case.find("failure") is not None or case.find("error") is not None
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        out[f"{check}::{case.get('name')}"] = {"outcome": "failed" if failed else "passed"}
        out[f"{check}::{case.get('name')}"].update(props)
    return out


def _run(pytester: pytest.Pytester) -> pytest.RunResult:
    # A subprocess: the proxy lives in this process and uses httpx, which an in-process
    # pytester run would unload.
    return pytester.runpytest_subprocess("-q", "--junitxml=out.xml", "-p", "no:cacheprovider")


def test_llama_server_is_deterministic_and_batch_invariant_at_its_concurrency(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    # A faithful proxy: it only counts (and holds each request 0.2 s, so that requests sent
    # together are seen together even when the tiny model answers in a few milliseconds).
    with FaultyProxy(llama, Fault(delay_s=0.2)) as proxy:
        _write(
            pytester,
            adder,
            llama_at(proxy.url),
            DETERMINISM,
        )
        result = _run(pytester)
        assert result.parseoutcomes() == {"passed": 9}, result.stdout.str()
        # All 8 prompts x 6 runs were sent at once, 4 in flight (the backend's default).
        assert proxy.requests == 48 and proxy.max_in_flight == 4
    _write(pytester, adder, llama_at(llama), NEEDLE)
    result = _run(pytester)
    assert result.parseoutcomes() == {"passed": 9}, result.stdout.str()
    cases = _outcomes(pytester)
    assert cases["batch-invariance(needle)::s04"]["infercheck_matching_trials"] == "2"
    result.stdout.fnmatch_lines(["*needle*adder@llama*16*8/8*concurrent burst*PASS*"])


def test_determinism_fails_on_exactly_the_perturbed_prompts(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    # One request at a time: generation k (1-based) is run (k-1) % 3 of prompt (k-1) // 3.
    # perturb_every=7 alters generations 7, 14, 21: prompts 2, 4, 6 -> s03, s05, s07.
    checks = DETERMINISM.replace("runs: 6", "runs: 3").replace("1.0e-5", "1.0")
    with FaultyProxy(llama, Fault(perturb_every=7)) as proxy:
        _write(pytester, adder, llama_at(proxy.url, max_concurrency=1), checks)
        result = _run(pytester)
        assert proxy.requests == 24 and proxy.altered == 3 and proxy.max_in_flight == 1
    cases = _outcomes(pytester)
    failed = sorted(k.split("::")[1] for k, v in cases.items() if v["outcome"] == "failed")
    assert failed == ["aggregate", "s03", "s05", "s07"], result.stdout.str()
    for name in ("s03", "s05", "s07"):
        assert cases[f"determinism(det)::{name}"]["infercheck_distinct"] == "2"
        assert float(cases[f"determinism(det)::{name}"]["infercheck_modal_share"]) == pytest.approx(
            2 / 3
        )
    assert cases["determinism(det)::s01"]["infercheck_modal_share"] == "1.0"
    # score = (5 x 1 + 3 x 2/3) / 8 = 0.875 < min_determinism 1.0
    assert float(cases["determinism(det)::aggregate"]["infercheck_determinism_score"]) == 0.875
    result.stdout.fnmatch_lines(
        [
            "*2 distinct outputs in 3 runs (modal share 0.6667)*",
            "*determinism score (95% Wilson interval *) 0.875 < min_determinism 1*",
            "*det*adder@llama*3*5/8*0.8750*FAIL*",
        ]
    )


def test_failed_runs_count_in_the_denominator(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    """A prompt longer than a slot's context (64 tokens) gets a real HTTP 400 on every run:
    those runs are failures, not missing runs."""
    _write(
        pytester,
        adder,
        llama_at(llama),
        DETERMINISM.replace("runs: 6", "runs: 3") + "    suites: [long.jsonl]\n",
        suites=", long.jsonl",
    )
    long = "12+34=" * 20  # 121 tokens
    pytester.makefile(
        ".jsonl",
        long=f'{{"id": "ok", "prompt": "7+8=", "max_tokens": 5}}\n'
        f'{{"id": "long", "prompt": "{long}", "max_tokens": 5}}',
    )
    result = _run(pytester)
    cases = _outcomes(pytester)
    assert {k: v["outcome"] for k, v in cases.items()} == {
        "determinism(det)::ok": "passed",
        "determinism(det)::long": "failed",
        "determinism(det)::aggregate": "failed",
    }, result.stdout.str()
    long_case = cases["determinism(det)::long"]
    assert long_case["infercheck_errors"] == "3" and long_case["infercheck_modal_share"] == "0.0"
    assert long_case["infercheck_distinct"] == "0"
    # score = (1 + 0) / 2; 3 of 6 runs failed.
    assert cases["determinism(det)::aggregate"]["infercheck_determinism_score"] == "0.5"
    result.stdout.fnmatch_lines(
        [
            "*3 runs: modal share 0.0000, 0 distinct outputs, 3 failed*",
            "*run 0: *HTTP 400*exceeds the available context size*",
            "*adder@llama: every run (3 of 3) of long failed: HTTP 400: *exceeds the available*",
            "*error rate (3/3 runs failed) 1 > max_error_rate 0*",
            "*error rate over all runs (3/6 runs failed) 0.5 > max_error_rate 0*",
        ]
    )


def test_an_item_whose_every_run_failed_fails_whatever_the_error_rate_allows(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    """``max_error_rate: 1.0`` allows failed runs, but a prompt whose every run failed (a
    real HTTP 400: longer than a slot's context) has nothing to judge. Before, its item
    passed (3/3 <= 1.0, no distinct outputs) and so did the aggregate; it fails with the
    server's message."""
    _write(
        pytester,
        adder,
        llama_at(llama),
        "  - determinism: {target: adder@llama, runs: 3}\n    name: det\n"
        "    max_error_rate: 1.0\n    suites: [long.jsonl]\n",
        suites=", long.jsonl",
    )
    long = "12+34=" * 20  # 121 tokens
    pytester.makefile(
        ".jsonl",
        long=f'{{"id": "ok", "prompt": "7+8=", "max_tokens": 5}}\n'
        f'{{"id": "long", "prompt": "{long}", "max_tokens": 5}}',
    )
    result = _run(pytester)
    cases = _outcomes(pytester)
    assert {k: v["outcome"] for k, v in cases.items()} == {
        "determinism(det)::ok": "passed",
        "determinism(det)::long": "failed",
        "determinism(det)::aggregate": "failed",
    }, result.stdout.str()
    assert cases["determinism(det)::long"]["infercheck_errors"] == "3"
    result.stdout.fnmatch_lines(
        [
            "*adder@llama: every run (3 of 3) of long failed: HTTP 400: *exceeds the available "
            "context size*",
            "*1 of 2 items failed: long (adder@llama: every run (3 of 3) of long failed: *",
        ]
    )


def test_batch_invariance_fails_when_concurrency_changes_outputs(
    pytester: pytest.Pytester, llama: str, adder: str
) -> None:
    # The whole batch of 6 in flight at once (max_concurrency 8), each request held 0.2 s:
    # every batched request overlaps the others, the prompt alone overlaps nothing.
    fault = Fault(perturb_when_concurrent=True, delay_s=0.2)
    with FaultyProxy(llama, fault) as proxy:
        _write(pytester, adder, llama_at(proxy.url, max_concurrency=8), NEEDLE)
        result = _run(pytester)
        assert proxy.max_in_flight == 6
        # 8 prompts x 2 trials x 6 batched requests altered; the 8 alone requests not.
        assert proxy.requests == 8 + 8 * 2 * 6 and proxy.altered == 8 * 2 * 6
    cases = _outcomes(pytester)
    items = {k: v for k, v in cases.items() if not k.endswith("aggregate")}
    assert len(items) == 8 and all(v["outcome"] == "failed" for v in items.values())
    assert all(v["infercheck_matching_trials"] == "0" for v in items.values())
    assert cases["batch-invariance(needle)::aggregate"]["infercheck_invariant_prompts"] == "0"
    result.stdout.fnmatch_lines(
        [
            "*trial 0 (position * of 6): output differs from the prompt alone at *",
            "*needle*adder@llama*16*0/8*concurrent burst*FAIL*",
        ]
    )


def test_vllm_mlx_engines(pytester: pytest.Pytester, adder: str, vllm_mlx_bin: Path) -> None:
    hub = pytester.path / "hub"
    hub.mkdir()
    backends = vllm_backends(vllm_mlx_bin, hub, max_concurrency=8)
    checks = """\
  - determinism: {target: adder@vllm, runs: 4}
    suites: [addition.jsonl]
  - determinism: {target: adder@vllmcb, runs: 8}
    suites: [addition.jsonl]
  - batch-invariance: {target: adder@vllm, trials: 1, batch_size: 4}
    suites: [addition.jsonl]
  - batch-invariance: {target: adder@vllmcb, trials: 2, batch_size: 8}
    suites: [addition.jsonl]
  - determinism: {target: adder@vllmcb, runs: 40}
    name: flip
    suites: [flip.jsonl]
"""
    pytester.makefile(
        ".jsonl",
        flip='{"id": "z10", "prompt": "<s>1+0=", "answer": "1", "answer_kind": "number", '
        '"max_tokens": 5}',
    )
    _write(pytester, adder, backends, checks, suites=", flip.jsonl")
    result = _run(pytester)
    cases = _outcomes(pytester)
    failed = sorted(k for k, v in cases.items() if v["outcome"] == "failed")
    assert failed == ["determinism(flip)::aggregate", "determinism(flip)::z10"], result.stdout.str()
    assert len(cases) == 4 * 9 + 2
    flip = cases["determinism(flip)::z10"]
    assert int(flip["infercheck_distinct"]) >= 2 and float(flip["infercheck_modal_share"]) < 1
    result.stdout.fnmatch_lines(
        [
            "*adder.vllm)*adder@vllm*4*8/8*1.0000*PASS*",
            "*adder.vllmcb)*adder@vllmcb*8*8/8*1.0000*PASS*",
            "*flip*adder@vllmcb*40*0/1*FAIL*",
            "*adder@vllm *8*8/8*sequential (the backend takes one request at a time)*PASS*",
            "*adder@vllmcb*16*8/8*concurrent burst*PASS*",
        ]
    )
