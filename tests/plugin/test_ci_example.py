"""examples/ci: the engine-upgrade gate runs as shipped, its workflow only uses options that
exist and installs only files that exist, and the workflow's own steps (two shards, then the
merge) pass on the unchanged engine and fail in the merge when the engine changes (the 4-bit
model standing in for it).

Its vLLM form (``examples/ci-vllm``) needs a GPU runner and cannot run here:
its workflow is checked the same way (options, files), and its matrix is collected with the
tiny adder standing in for the model the workflow downloads."""

from __future__ import annotations

import glob
import itertools
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from pytest_infercheck.report.merge import merge_results
from pytest_infercheck.report.results import load_results

CI = REPO / "examples" / "ci"
CI_VLLM = REPO / "examples" / "ci-vllm"


def _pytest(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )


WORKFLOWS = [CI / "upgrade-gate.yml", CI_VLLM / "upgrade-gate-vllm.yml"]


def _workflow_commands(name: Path = CI / "upgrade-gate.yml") -> list[str]:
    return [command for command, _ in _workflow_runs(name)]


def _workflow_runs(name: Path) -> list[tuple[str, Path]]:
    """Each ``run`` step of workflow ``name``, one line per command (a folded or literal block
    split as its shell would run it), with the folder it runs in (the step's
    ``working-directory``, else its job's default, else the checkout's root)."""
    workflow = yaml.safe_load(name.read_text())
    runs = []
    for job in workflow["jobs"].values():
        default = job.get("defaults", {}).get("run", {}).get("working-directory", ".")
        for step in job["steps"]:
            if "run" not in step:
                continue
            where = REPO / step.get("working-directory", default)
            text = step["run"]
            lines = [text] if not text.rstrip("\n").count("\n") else text.splitlines()
            runs += [(" ".join(line.split()), where) for line in lines if line.strip()]
    return runs


@pytest.mark.parametrize("name", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_installs_only_files_that_exist(name: Path) -> None:
    """Every ``pip install -r FILE`` and ``-e PATH`` of the workflow names a file of the
    checkout, from the folder its step runs in (the example once named a
    ``requirements-engine.txt`` that did not exist)."""
    installs = [(c, where) for c, where in _workflow_runs(name) if "pip install" in c]
    assert installs
    for command, where in installs:
        words = shlex.split(command)
        for flag, value in itertools.pairwise(words):
            if flag in {"-r", "-e"}:
                path = where / value.split("[")[0]
                assert path.exists(), f"{name}: {command}: {path} does not exist"
        assert where.is_dir(), f"{name}: {command}: runs in {where}, which does not exist"


def test_engine_requirements_pin_the_engine_of_the_golden() -> None:
    """As shipped the engine is unchanged: the pinned versions are those the golden was
    recorded with (a pull request that bumps them is what the gate judges)."""
    pins = dict(
        re.findall(
            r"^([\w-]+)(?:\[\w+\])?==([\w.]+)", (CI / "requirements-engine.txt").read_text(), re.M
        )
    )
    golden = json.loads((CI / "goldens" / "adder-v1.json").read_text())["engine"]
    assert pins == {"mlx": golden["mlx"], "mlx-lm": golden["mlx-lm"]}


def test_vllm_workflow_uses_only_existing_options() -> None:
    commands = _workflow_commands(CI_VLLM / "upgrade-gate-vllm.yml")
    gates = [c for c in commands if c.startswith("python -m pytest")]
    assert any("--infercheck-record" in c for c in gates)
    help_text = _pytest(CI_VLLM, "--help").stdout
    for option in {o for c in gates for o in re.findall(r"(?<!\S)(--[a-z][a-z-]*)", c)}:
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text), option


def test_vllm_gate_collects_with_a_model_in_place(tmp_path: Path) -> None:
    """The vLLM matrix collects as the workflow runs it once the model is downloaded (the tiny
    adder in its place): the golden comparison and determinism on every reasoning prompt."""
    work = tmp_path / "vllm"
    shutil.copytree(CI_VLLM, work)
    model = re.search(
        r"--local-dir (\S+)", " ".join(_workflow_commands(CI_VLLM / "upgrade-gate-vllm.yml"))
    )
    assert model is not None
    shutil.copytree(REPO / "examples" / "models" / "tiny-adder", work / model.group(1))
    done = _pytest(work, "--collect-only", "-q")
    assert done.returncode == 0, done.stdout[-3000:]
    ids = re.findall(r"^infercheck\.yaml::(\S+)$", done.stdout, re.M)
    assert len([i for i in ids if i.startswith("compare(golden.qwen-vllm-vs-qwen)")]) == 61
    assert len([i for i in ids if i.startswith("determinism(qwen)")]) == 61


def test_workflow_uses_only_existing_options() -> None:
    commands = _workflow_commands()
    gate = next(c for c in commands if c.startswith("python -m pytest"))
    options = set(re.findall(r"(?<!\S)(--[a-z][a-z-]*)", gate))
    assert {"--infercheck-shard", "--infercheck-results", "--html"} <= options
    help_text = _pytest(CI, "--help").stdout
    for option in options:
        assert re.search(rf"(?<![\w-]){re.escape(option)}\b", help_text), option
    report = next(c for c in commands if c.startswith("pytest-infercheck report"))
    usage = subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "report", "--help"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-o" in usage and report.endswith("-o infercheck-report.html")


def test_gate_passes_as_shipped(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    done = _pytest(CI, f"--infercheck-results={results}")
    assert done.returncode == 0, done.stdout[-3000:]
    data = json.loads(results.read_text())
    aggregates = {i["check"]: i for i in data["items"] if i["role"] == "aggregate"}
    gate = aggregates["compare(golden.adder-v1-vs-adder)"]
    assert gate["outcome"] == "passed"
    (level,) = gate["data"]["levels"]
    assert level["n_prompts"] == 60 and level["n_flips"] == 0 and level["kl_max"] < 1e-5
    assert "golden:adder-v1" in gate["data"]["engines"]


def _workflow_steps() -> tuple[str, str, list[int]]:
    """The shard job's pytest command (``${{ matrix.shard }}`` left in), the merge job's
    command and the shards of the matrix, as ``upgrade-gate.yml`` has them."""
    workflow = yaml.safe_load((CI / "upgrade-gate.yml").read_text())
    commands = _workflow_commands()
    shard = next(c for c in commands if c.startswith("python -m pytest"))
    merge = next(c for c in commands if c.startswith("pytest-infercheck report"))
    return shard, merge, workflow["jobs"]["gate"]["strategy"]["matrix"]["shard"]


def _run(cwd: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as the workflow's shell runs it in ``cwd``: ``python`` is this
    interpreter, ``pytest-infercheck`` its console script, globs expanded."""
    words = shlex.split(command)
    if words[0] == "python":
        words[0] = sys.executable
    elif words[0] == "pytest-infercheck":
        words[:1] = [sys.executable, "-m", "pytest_infercheck.cli"]
    expanded = [w for word in words for w in (sorted(glob.glob(word, root_dir=cwd)) or [word])]
    return subprocess.run(expanded, cwd=cwd, capture_output=True, text=True, check=False)


def _copy_of_the_example(tmp_path: Path, model: Path) -> Path:
    """examples/ci in ``tmp_path`` (the workflow's outputs stay out of the repository), its
    model ``model`` and its suite where the repository has it."""
    work = tmp_path / "ci"
    shutil.copytree(CI, work, ignore=shutil.ignore_patterns("*.html", "*.json.tmp", "results*"))
    matrix = (work / "infercheck.yaml").read_text()
    matrix = matrix.replace("../models/tiny-adder", str(model))
    matrix = matrix.replace("../quickstart/", str(REPO / "examples" / "quickstart") + "/")
    (work / "infercheck.yaml").write_text(matrix)
    return work


def _aggregates(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {i["check"]: i for i in results["items"] if i["role"] == "aggregate"}


GATE = "compare(golden.adder-v1-vs-adder)"


def test_the_workflow_passes_on_the_unchanged_engine_sharded_then_merged(tmp_path: Path) -> None:
    """Both shard jobs pass (each defers the suite gates: 0 flips in 30 prompts could not
    pass a 0.1 flip-rate gate on its Wilson bound), and so does the merge job, which judges
    the gates on all 60 prompts."""
    work = _copy_of_the_example(tmp_path, REPO / "examples" / "models" / "tiny-adder")
    shard_command, merge_command, shards = _workflow_steps()
    assert shards == [1, 2]
    for shard in shards:
        done = _run(work, shard_command.replace("${{ matrix.shard }}", str(shard)))
        assert done.returncode == 0, done.stdout[-3000:]
        assert (
            f"suite gates deferred to `pytest-infercheck report` (shard {shard}/2)" in done.stdout
        )
        results = json.loads((work / f"results-{shard}.json").read_text())
        for aggregate in _aggregates(results).values():
            assert aggregate["outcome"] == "passed" and aggregate["violations"] == []
            assert aggregate["gates_deferred_to"] == f"{shard}/2"
        (level,) = _aggregates(results)[GATE]["data"]["levels"]
        assert 0 < level["n_prompts"] < 60
        junit = (work / f"junit-{shard}.xml").read_text()
        assert f'name="infercheck_gates_deferred" value="{shard}/2"' in junit
        assert (work / f"report-{shard}.html").exists()

    merged = _run(work, merge_command)
    assert merged.returncode == 0, merged.stderr
    assert merged.stdout == "wrote infercheck-report.html\n" and merged.stderr == ""
    html = (work / "infercheck-report.html").read_text()
    assert "suite gates deferred" not in html.split("<h2>items")[1]  # the merge judged them
    # The merged aggregates are those of the whole suite, the determinism one included.
    files = [(str(p), load_results(p)) for p in sorted(work.glob("results-*.json"))]
    (run,), warnings = merge_results(files)
    assert warnings == [] and run["run"]["exitstatus"] == 0
    aggregates = _aggregates(run)
    (level,) = aggregates[GATE]["data"]["levels"]
    assert (level["n_prompts"], level["n_answered"], level["n_flips"]) == (60, 60, 0)
    assert level["flip_rate_high"] == pytest.approx(0.0602, abs=1e-4)
    determinism = aggregates["determinism(adder)"]["data"]
    assert (determinism["prompts"], determinism["deterministic_prompts"]) == (60, 60)
    assert determinism["score"] == 1.0 and determinism["errors"] == 0
    assert all(a["outcome"] == "passed" for a in aggregates.values())


def test_the_workflow_fails_in_the_merge_when_the_engine_changes(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """The 4-bit model standing in for a changed engine: the shard jobs fail on the prompts
    whose answer turned wrong, and the merge job fails naming the flip-rate gate judged on
    all 60 prompts."""
    work = _copy_of_the_example(tmp_path, tiny_models["q4"])
    shard_command, merge_command, shards = _workflow_steps()
    codes = []
    for shard in shards:
        done = _run(work, shard_command.replace("${{ matrix.shard }}", str(shard)))
        codes.append(done.returncode)
        results = json.loads((work / f"results-{shard}.json").read_text())
        assert _aggregates(results)[GATE]["outcome"] == "passed"  # deferred
    assert 1 in codes and set(codes) <= {0, 1}

    merged = _run(work, merge_command)
    assert merged.returncode == 1, merged.stderr
    assert merged.stdout == "wrote infercheck-report.html\n"
    failed = re.findall(r"failed: (\S+::aggregate): (.*)", merged.stderr)
    gate = f"infercheck.yaml::{GATE}::addition::aggregate"
    assert {nodeid for nodeid, _ in failed} == {gate}, merged.stderr  # determinism passes
    items = re.findall(r"failed: (\S+::addition::[a-z]\d+): (.*)", merged.stderr)
    assert any("answer flip correct_to_wrong" in why for _, why in items), merged.stderr
    flip = re.compile(
        r"adder@local: flip rate \(upper 95% Wilson bound, [1-9]\d*/60 answered\) 0\.\d+ "
        r"> flips\.max_rate 0\.1"
    )
    assert any(flip.fullmatch(reason) for _, reason in failed), merged.stderr
    assert merged.stderr.endswith(f"{len(failed) + len(items)} failure(s) in the merged run\n")


@pytest.fixture(autouse=True)
def _inner_ini() -> None:
    """examples/ci is its own pytest project; no pytester ini is written here."""


def test_the_how_to_shows_the_vllm_matrix_as_shipped() -> None:
    """docs/how-to/ci-upgrade-gate.md shows examples/ci-vllm/infercheck.yaml (comments aside)."""
    page = (REPO / "docs" / "how-to" / "ci-upgrade-gate.md").read_text()
    blocks = [yaml.safe_load(b) for b in re.findall(r"^```yaml\n(.*?)^```", page, re.S | re.M)]
    shipped = yaml.safe_load((CI_VLLM / "infercheck.yaml").read_text())
    assert shipped in blocks
