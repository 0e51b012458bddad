"""The plugin's fixed start-up, stage by stage, for a ``diff`` matrix over HTTP.

    .venv/bin/python bench/startup.py [--runs 7] [--tree DIR ...]

Each stage is a fresh subprocess, run ``--runs`` times (the stages alternating), reported
as the median wall and CPU (user + system) time:

- ``interpreter``: ``python -c pass``;
- ``pytest + plugins``: ``python -m pytest -p no:cacheprovider -q --collect-only`` in a
  folder with nothing to collect (pytest, its plugins, this plugin's module);
- ``collect diff matrix``: the same on a ``diff`` matrix (llama-server vs vllm-mlx by URL,
  20 prompts): reading and validating the matrix, importing the check kinds it uses,
  building the items. No server is contacted at collection.

With ``--tree DIR`` (repeatable) the stages run once per tree, that tree first on
``PYTHONPATH`` (e.g. a ``git archive`` of an older commit), so two versions are measured in
the same rounds. Every tree's ``pytest_infercheck`` is byte-compiled and pytest's cache
of its rewritten modules filled first (``common.ensure_bytecode``; ``--cold``: not). The
server side of start-up (readiness checks, one request) is in ``speed.py``'s ``plugin
start-up`` row.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import PYTHON, REPO, load_average, run_timed, write_suite
from stats import Sample, alternating_order, summarize

MATRIX = """\
models:
  m: {path: /nonexistent/model, gguf: /nonexistent/model.gguf}
backends:
  llama: {kind: llama-server, url: "http://127.0.0.1:9", max_concurrency: 4}
  vllm: {kind: vllm-mlx, url: "http://127.0.0.1:10", chat: false, max_concurrency: 4}
suites: [./suite.jsonl]
settings: {max_tokens: 64}
checks: [{diff: {model: m, backends: [llama, vllm]}}]
"""


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--runs", type=int, default=7, help="runs per stage (default 7)")
    p.add_argument("--tree", type=Path, action="append", help="a source tree to measure")
    p.add_argument(
        "--cold",
        action="store_true",
        help="do not byte-compile or warm pytest's rewrite cache first (measures a tree as "
        "it is: with PYTHONDONTWRITEBYTECODE=1 and no cache, every run compiles the plugin)",
    )
    args = p.parse_args(argv)
    trees = [t.resolve() for t in (args.tree or [REPO])]
    if not args.cold:
        for tree in trees:
            env = {**os.environ, "PYTHONPATH": str(tree)}
            subprocess.run(
                [
                    PYTHON,
                    "-c",
                    f"import sys; sys.path.insert(0, {str(REPO / 'bench')!r}); "
                    "from common import ensure_bytecode; print(ensure_bytecode())",
                ],
                cwd=tree,
                env=env,
                check=True,
            )
    print(f"load average: {load_average()}", flush=True)
    with tempfile.TemporaryDirectory(prefix="infercheck-startup-") as tmp:
        work, empty = Path(tmp) / "matrix", Path(tmp) / "empty"
        for d in (work, empty):
            d.mkdir()
            (d / "pytest.ini").write_text("[pytest]\n")
        (work / "infercheck.yaml").write_text(MATRIX)
        write_suite(work / "suite.jsonl", [f"prompt {i}" for i in range(20)], 64)
        pytest: list[str | Path] = [PYTHON, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
        pytest.append("--collect-only")
        stages: dict[str, tuple[list[str | Path], Path]] = {
            "interpreter": ([PYTHON, "-c", "pass"], work),
            "pytest + plugins": (pytest, empty),
            "collect diff matrix": ([*pytest, "infercheck.yaml"], work),
        }
        tools = [f"{name} @ {tree}" for tree in trees for name in stages]
        runs: dict[str, list[Sample]] = {t: [] for t in tools}
        for order in alternating_order(tools, args.runs):
            for tool in order:
                name, _, tree = tool.partition(" @ ")
                cmd, cwd = stages[name]
                env = {"PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
                t = run_timed(cmd, cwd, env=env, ok_codes=(0, 5))
                runs[tool].append(Sample(t.seconds, t.cpu_seconds, t.peak_rss))
    print(f"=== plugin start-up, median of {args.runs} alternating runs")
    print(f"  {'stage':<60}{'wall':>8}{'cpu':>8}")
    for tool, samples in runs.items():
        s = summarize(tool, samples)
        print(f"  {tool:<60}{s.wall_s:7.3f}s{s.cpu_s:7.3f}s")
    print(f"load average at the end: {load_average()}")
    print(json.dumps({t: [vars(s) for s in v] for t, v in runs.items()}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
