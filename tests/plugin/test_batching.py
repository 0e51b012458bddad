"""Batching of in-process comparisons, through the plugin (real mlx-lm, the tiny adder):

- the quickstart's comparisons give the same items and numbers batched and one at a time
  (``--infercheck-no-batching``), bit for bit on CPU; only the batch records differ;
- every comparison record says how each side was batched and how it was scored;
- ``batching: false`` on a backend, and the command line, turn batching off and say so;
- a backend whose batched outputs differ fails the batching probe: its comparisons fall
  back to one at a time and say so (records and item text), with the numbers of an
  unperturbed run;
- the sweep's self-check generates its second baseline run the other way;
- a batched run is split into one batch per CPU core (each on its own mlx stream), of
  about equal work: each record names its own batch's size.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from pytest_infercheck.backends.mlx_lockstep import cpu_parallelism

from .helpers import ADDITION

BATCH_KEYS = frozenset({"base_batch", "test_batch", "batching_note", "generated"})
"""What may differ between a batched and an unbatched run: how it was generated."""
TIMING_KEYS = frozenset(
    {"duration_s", "latency_p50_s", "latency_p95_s", "tokens_per_s", "achieved_concurrency"}
)


def batches(sizes: list[int], prompts: int) -> list[int]:
    """The batches a check's ``prompts`` were stepped in, from each record's batch size
    (``base_batch`` or ``test_batch``): a batch of ``s`` prompts shows ``s`` times. Checks
    that they are one batch per CPU core (as many as there are prompts at most)."""
    counts = Counter(sizes)
    assert all(count % size == 0 for size, count in counts.items()), counts
    found = sorted(size for size, count in counts.items() for _ in range(count // size))
    assert sum(found) == prompts
    assert len(found) == min(cpu_parallelism(), prompts), found
    return found


PERTURBED_CONFTEST = '''
from pytest_infercheck.backends.mlx_lm import MlxLmBackend
from pytest_infercheck.backends.mlx_lockstep import Stepper


class BatchPerturbedBackend(MlxLmBackend):
    """mlx-lm whose forward passes shift the logits slightly when several sequences share
    them: an engine whose batching changes its outputs."""

    def stepper(self):
        inner = super().stepper()

        def forward(inputs, cache):
            logits = inner.model(inputs, cache=cache)
            if inputs.shape[0] > 1:
                logits = logits + 1e-3 * (logits > 0)
            return logits

        return Stepper(inner.model, inner.eos_ids, inner.decode, forward)


def pytest_infercheck_wrap_backend(backend, name, spec):
    if name != "perturbed":
        return None
    return BatchPerturbedBackend(name, backend.spec, chat=backend.chat, add_bos=backend.add_bos)
'''


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in BATCH_KEYS | TIMING_KEYS}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def _items(path: Path) -> dict[str, dict[str, Any]]:
    return {i["nodeid"]: i for i in json.loads(path.read_text())["items"]}


# --- the quickstart, batched and not --------------------------------------------------------


@pytest.fixture(autouse=True)
def _inner_ini() -> None:
    """The quickstart is its own project (no pytester ini); the pytester tests write theirs."""


def _quickstart(work: Path, *args: str) -> dict[str, dict[str, Any]]:
    done = subprocess.run(
        [
            *[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            *["-k", "compare or sweep", "--infercheck-results=r.json", *args],
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (work / "r.json").exists(), done.stdout[-3000:] + done.stderr[-3000:]
    items = _items(work / "r.json")
    (work / "r.json").unlink()
    return items


def test_quickstart_same_numbers_batched_and_one_at_a_time(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    work = tmp_path / "quickstart"
    shutil.copytree(REPO / "examples" / "quickstart", work, ignore=shutil.ignore_patterns("models"))
    matrix = (work / "infercheck.yaml").read_text()
    for name in ("bf16", "q8", "q4"):
        matrix = matrix.replace(f"models/tiny-{name}", str(tiny_models[name]))
    (work / "infercheck.yaml").write_text(matrix)

    batched = _quickstart(work)
    alone = _quickstart(work, "--infercheck-no-batching")
    assert batched.keys() == alone.keys() and len(batched) == 2 * 61 + 2 * 60 + 1 + 1
    for nodeid, item in batched.items():
        other = alone[nodeid]
        assert item["outcome"] == other["outcome"], nodeid
        assert item["violations"] == other["violations"], nodeid
        assert _strip(item["data"]) == _strip(other["data"]), nodeid  # exact, no tolerance
    prompts = [i["data"] for i in batched.values() if i["role"] == "prompt"]
    assert len(prompts) == 240
    assert {d["scoring"] for d in prompts} == {"lockstep"}
    for check in {i["check"] for i in batched.values()}:
        data = [i["data"] for i in batched.values() if i["check"] == check]
        mine = [d for d in data if "base_batch" in d]
        for level in {d["test"] for d in mine}:
            level_data = [d for d in mine if d["test"] == level]
            assert batches([d["base_batch"] for d in level_data], 60) == batches(
                [d["test_batch"] for d in level_data], 60
            )
    assert not any("batching_note" in d for d in prompts)
    prompts = [i["data"] for i in alone.values() if i["role"] == "prompt"]
    assert {(d["base_batch"], d["test_batch"], d["scoring"]) for d in prompts} == {
        (1, 1, "lockstep")
    }
    assert {d["batching_note"] for d in prompts} == {
        "batching turned off (--infercheck-no-batching)"
    }
    # the self-check's second run the other way when it can be: batched first, then alone;
    # with batching off, both alone
    (check_b,) = [i["data"] for i in batched.values() if i["role"] == "self-check"]
    (check_a,) = [i["data"] for i in alone.values() if i["role"] == "self-check"]
    assert check_b == {
        "problems": [],
        "failed": [],
        "generated": "batched, then one at a time",
    }
    assert check_a["problems"] == []
    assert check_a["generated"].startswith("one at a time, twice (batching turned off")


# --- switches and the probe (pytester, 8 prompts) ---------------------------------------------


def _matrix(models: dict[str, Path], backends: str, checks: str) -> str:
    lines = ["models:", *(f"  {n}: {{path: '{p}'}}" for n, p in models.items())]
    return "\n".join([*lines, "backends:", backends, "suites: [addition.jsonl]", "checks:", checks])


def _suite() -> str:
    return "\n".join(
        f'{{"id": "{i}", "prompt": "{p}", "answer": "{a}", "answer_kind": "number", '
        f'"max_tokens": 6}}'
        for i, p, a in ADDITION
    )


def _run(
    pytester: pytest.Pytester, matrix: str, *args: str
) -> tuple[dict[str, dict[str, Any]], str]:
    """The items of the results file, and the terminal output."""
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makefile(".jsonl", addition=_suite())
    pytester.makefile(".yaml", infercheck=matrix)
    out = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(f"--infercheck-results={out}", *args)
    assert out.exists(), result.stdout.str()[-3000:]
    items = _items(out)
    out.unlink()
    return items, result.stdout.str()


def _prompt_data(items: dict[str, dict[str, Any]], check: str) -> list[dict[str, Any]]:
    return [i["data"] for i in items.values() if i["check"] == check and i["role"] == "prompt"]


def test_probe_failure_falls_back_to_one_at_a_time_and_says_so(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makeconftest(PERTURBED_CONFTEST)
    models = {"bf16": tiny_models["bf16"], "q4": tiny_models["q4"]}
    backends = "  local: {kind: mlx-lm}\n  perturbed: {kind: mlx-lm}"
    checks = (
        "  - compare: {baseline: bf16@local, test: q4@local}\n"
        "    name: faithful\n"
        "  - compare: {baseline: bf16@local, test: q4@perturbed}\n"
        "    name: perturbed\n"
        "  - sweep: {baseline: bf16@perturbed, models: [q4@local]}\n"
    )
    items, stdout = _run(pytester, _matrix(models, backends, checks))
    faithful, perturbed = (
        _prompt_data(items, "compare(faithful)"),
        _prompt_data(items, "compare(perturbed)"),
    )
    assert all(d["base_batch"] == d["test_batch"] > 1 for d in faithful)
    batches([d["base_batch"] for d in faithful], 8)
    assert not any("batching_note" in d for d in faithful)
    # the baseline's generation is the faithful compare's (cached, batched and licensed)
    assert [d["base_batch"] for d in perturbed] == [d["base_batch"] for d in faithful]
    assert {d["test_batch"] for d in perturbed} == {1}
    notes = {d["batching_note"] for d in perturbed}
    assert len(notes) == 1
    (note,) = notes
    assert note.startswith("q4@perturbed: batching probe failed (probe prompt 0: batched")
    assert note.endswith("; generated one at a time")
    # and in the terminal: pytest's warnings summary, once per target
    assert stdout.count("BatchingProbeWarning: q4@perturbed: batching probe failed") == 1
    assert stdout.count("BatchingProbeWarning: bf16@perturbed: batching probe failed") == 1
    # one at a time, the perturbation never applies: the faithful numbers
    for a, b in zip(faithful, perturbed, strict=True):
        assert (a["kl_per_position"], a["test_ids"]) == (b["kl_per_position"], b["test_ids"])
    # the sweep's perturbed baseline: one at a time, and its self-check says why
    sweep = [i for i in items.values() if i["check"] == "sweep(bf16)"]
    (check,) = [i["data"] for i in sweep if i["role"] == "self-check"]
    assert check["generated"].startswith("one at a time, twice (bf16@perturbed: batching probe")
    assert {i["data"]["base_batch"] for i in sweep if i["role"] == "prompt"} == {1}


def test_probe_tolerance_is_the_targets_batch_invariance_tolerance(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    """With a ``batch-invariance`` check of the perturbed target whose ``logprob_tolerance``
    covers the perturbation, the probe licenses batching it."""
    pytester.makeconftest(PERTURBED_CONFTEST)
    models = {"bf16": tiny_models["bf16"], "q4": tiny_models["q4"]}
    backends = "  local: {kind: mlx-lm}\n  perturbed: {kind: mlx-lm}"
    checks = (
        "  - compare: {baseline: bf16@local, test: q4@perturbed}\n"
        "  - batch-invariance: {target: q4@perturbed, trials: 1, batch_size: 2}\n"
        "    logprob_tolerance: 1.0\n"
    )
    items, stdout = _run(pytester, _matrix(models, backends, checks), "-k", "compare")
    assert "BatchingProbeWarning" not in stdout
    data = _prompt_data(items, "compare(bf16-vs-q4)")
    assert all(d["base_batch"] == d["test_batch"] > 1 for d in data)
    batches([d["test_batch"] for d in data], 8)
    assert not any("batching_note" in d for d in data)


def test_backend_batching_false_turns_it_off(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    models = {"bf16": tiny_models["bf16"], "q4": tiny_models["q4"]}
    backends = "  local: {kind: mlx-lm}\n  alone: {kind: mlx-lm, batching: false}"
    checks = (
        "  - compare: {baseline: bf16@local, test: q4@alone}\n"
        "    max_kl: 0.0\n"  # every item fails: its text is in the terminal output
    )
    pytester.makefile(".ini", pytest="[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makefile(".jsonl", addition=_suite())
    pytester.makefile(".yaml", infercheck=_matrix(models, backends, checks))
    result = pytester.runpytest_subprocess("--infercheck-results=r.json")
    data = _prompt_data(_items(pytester.path / "r.json"), "compare(bf16-vs-q4)")
    assert {(d["base_batch"], d["test_batch"]) for d in data} == {(1, 1)}
    assert {d["batching_note"] for d in data} == {"backend 'alone': batching: false"}
    assert "generated one at a time: backend 'alone': batching: false" in result.stdout.str()
