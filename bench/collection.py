"""Part 2: ``pytest --collect-only -q`` of a matrix of >= 20,000 items, minus start-up.

The matrix: one JSONL suite of ``n_prompts`` prompts (no ids, so every id is derived from
the text's SHA-256; half carry a reference answer) x two compare checks -> ``2 * n_prompts``
prompt items + 2 aggregates. The start-up baseline is the same command on a directory with
no matrix (pytest, its plugins and this plugin imported, nothing collected). Collection
never loads a model, so the model folders are empty placeholders.
"""

from __future__ import annotations

import json
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from common import PYTHON, Timed, best, run_timed


@dataclass
class CollectionResult:
    items: int
    run: Timed
    startup: Timed

    @property
    def net(self) -> float:
        return self.run.seconds - self.startup.seconds


def write_big_matrix(work: Path, n_prompts: int) -> Path:
    (work / "pytest.ini").write_text("[pytest]\n")
    for name in ("a", "b"):
        (work / "models" / name).mkdir(parents=True)
    with (work / "big.jsonl").open("w", encoding="utf-8") as f:
        for i in range(n_prompts):
            a, b = divmod(i, 100)
            record: dict[str, object] = {
                "prompt": f"What is {a} + {b}? Think it through, then end with 'Answer: <n>'. #{i}",
                "category": f"cat{i % 7}",
                "max_tokens": 64,
            }
            if i % 2 == 0:
                record["answer"] = str(a + b)
                record["answer_kind"] = "number"
            f.write(json.dumps(record) + "\n")
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        "  a: {path: ./models/a}\n"
        "  b: {path: ./models/b, quantization: 4bit}\n"
        "suites:\n"
        "  - ./big.jsonl\n"
        "checks:\n"
        "  - compare: {baseline: a, test: b}\n"
        "    max_kl: 0.05\n"
        "  - compare: {baseline: b, test: a}\n"
        "    min_similarity: 0.5\n"
    )
    return matrix


def _count(stdout: str) -> int:
    match = re.search(r"(\d+) tests? collected", stdout)
    if match is None:
        raise RuntimeError(f"cannot read the number of collected items:\n{stdout[-2000:]}")
    return int(match.group(1))


def measure(n_prompts: int = 10_000, repeat: int = 2) -> CollectionResult:
    with tempfile.TemporaryDirectory(prefix="infercheck-collect-") as tmp:
        work = Path(tmp) / "big"
        empty = Path(tmp) / "empty"
        work.mkdir()
        empty.mkdir()
        (empty / "pytest.ini").write_text("[pytest]\n")
        matrix = write_big_matrix(work, n_prompts)
        base = [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only"]
        runs, starts = [], []
        for _ in range(repeat):
            # exit code 5: no tests collected
            starts.append(run_timed(base, empty, ok_codes=(5,)))
            runs.append(run_timed([*base, matrix.name], work))
        run = best(runs)
        return CollectionResult(items=_count(run.stdout), run=run, startup=best(starts))
