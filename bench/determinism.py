"""Determinism benchmark: the plugin's ``determinism`` check vs ``infer-check determinism``.

    .venv/bin/python bench/determinism.py [--prompts 50] [--runs 20] [--max-tokens 32]

One run prepares the random-weight tiny llama (mlx folder + f32 GGUF, as bench/http_diff.py),
starts llama-server (``-np 4``) and vllm-mlx (``--continuous-batching``) on free loopback
ports (own process groups, logs in the work folder, always stopped), and then, per server,
times on the same prompts:

- the plugin: ``python -m pytest -q -p no:cacheprovider infercheck.yaml`` with
  ``determinism: {target: m@SERVER, runs: R}`` (raw completions, ``max_concurrency: C``);
- infer-check 0.2.6: ``infer-check determinism --backend llama-cpp|vllm-mlx --base-url URL
  --runs R --no-chat``, its sequential loop, from its own venv.

Both tools send R x N requests; the servers' logs count the requests and tokens each tool
really generated, so the work done is visible next to the time. The fastest of ``--repeat``
runs is kept. Not a timed test: numbers are printed side by side, ratios computed in one run.
"""

from __future__ import annotations

import argparse
import json
import signal
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from common import load_average, long_prompts
from common import write_suite as write_jsonl
from http_diff import (
    LLAMA_FLAGS,
    Best,
    Server,
    _on_sigterm,
    _work_line,
    both_servers,
    timed_run,
)
from overhead import INFER_CHECK_VERSION, ensure_infer_check, pytest_cmd

RATIO_TARGET = 1.0


def write_matrix(
    work: Path, model: Path, gguf: Path, server: Server, runs: int, c: int, max_tokens: int
) -> Path:
    """``infercheck.yaml``: the determinism check of ``m`` on ``server``."""
    (work / "pytest.ini").write_text("[pytest]\n")
    kind = "llama-server" if server.name == "llama-server" else "vllm-mlx"
    chat = "" if kind == "llama-server" else ", chat: false"
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        f"  m: {{path: {json.dumps(str(model))}, gguf: {json.dumps(str(gguf))}}}\n"
        "backends:\n"
        f"  s: {{kind: {kind}, url: {json.dumps(server.url)}, max_concurrency: {c}{chat}}}\n"
        "suites:\n"
        "  - ./suite.jsonl\n"
        "settings:\n"
        f"  max_tokens: {max_tokens}\n"
        "checks:\n"
        f"  - determinism: {{target: m@s, runs: {runs}}}\n"
    )
    return matrix


def infer_check_cmd(
    exe: Path, model: Path, server: Server, suite: Path, args: argparse.Namespace, out: Path
) -> list[str | Path]:
    backend = "llama-cpp" if server.name == "llama-server" else "vllm-mlx"
    return [
        exe,
        "determinism",
        "--model",
        model,
        "--backend",
        backend,
        "--base-url",
        server.url,
        "--prompts",
        suite,
        "--runs",
        str(args.runs),
        "--max-tokens",
        str(args.max_tokens),
        "--no-chat",
        "--output",
        out,
    ]


def plugin_summary(junit: Path) -> dict[str, Any]:
    """Items, failures and the determinism score of a plugin run, from its JUnit XML."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    failed = sum(any(c.tag in ("failure", "error") for c in case) for case in cases)
    props = {
        p.get("name", ""): p.get("value", "")
        for case in cases
        if case.get("name") == "aggregate"
        for p in case.iter("property")
    }
    return {
        "items": len(cases),
        "failed": failed,
        "score": props.get("infercheck_determinism_score", "?"),
        "deterministic": props.get("infercheck_deterministic_prompts", "?"),
    }


def infer_check_summary(out: Path) -> dict[str, Any]:
    files = sorted(out.glob("*.json"))
    if not files:
        return {"results": 0}
    data = json.loads(files[-1].read_text())
    results = data if isinstance(data, list) else data.get("results", [])
    scores = [float(r["determinism_score"]) for r in results]
    return {
        "prompts": len(results),
        "deterministic": sum(int(r["identical_count"]) == int(r["num_runs"]) for r in results),
        "score": sum(scores) / len(scores) if scores else float("nan"),
    }


def measure_server(
    server: Server,
    servers: Sequence[Server],
    model: Path,
    gguf: Path,
    prompts: list[str],
    args: argparse.Namespace,
    work: Path,
    infer_check: Path,
) -> list[str]:
    d = work / server.name
    d.mkdir(exist_ok=True)
    write_jsonl(d / "suite.jsonl", prompts, args.max_tokens)
    write_matrix(d, model, gguf, server, args.runs, args.concurrency, args.max_tokens)
    plugin, ic = Best(), Best()
    for i in range(args.repeat):
        print(f"{server.name} run {i + 1}/{args.repeat}: plugin ...", flush=True)
        junit = d / f"junit-{i}.xml"
        cmd: list[str | Path] = [*pytest_cmd(d / "infercheck.yaml", f"--junitxml={junit.name}")]
        plugin.runs.append(timed_run(cmd, d, junit, servers))
        print(f"{server.name} run {i + 1}/{args.repeat}: infer-check ...", flush=True)
        out = d / f"ic-{i}"
        cmd = infer_check_cmd(infer_check, model, server, d / "suite.jsonl", args, out)
        ic.runs.append(timed_run(cmd, d, out, servers, env={"HF_HUB_OFFLINE": "1"}))
    p, q = plugin.best, ic.best
    ps, qs = plugin_summary(p.out), infer_check_summary(q.out)
    ratio = p.timed.seconds / q.timed.seconds
    verdict = "ok" if ratio < RATIO_TARGET else "ABOVE TARGET"
    return [
        f"{server.name}:",
        f"  plugin (max_concurrency {args.concurrency}): {p.timed.seconds:7.2f} s wall "
        f"(runs: {plugin.walls()}); servers did: {_work_line(p)}",
        f"    {ps['items']} items, {ps['failed']} failed; deterministic prompts "
        f"{ps['deterministic']}, determinism score {ps['score']}",
        f"  infer-check {INFER_CHECK_VERSION} determinism: {q.timed.seconds:7.2f} s wall "
        f"(runs: {ic.walls()}); servers did: {_work_line(q)}",
        f"    {qs['prompts']} prompts; deterministic prompts {qs['deterministic']}, "
        f"determinism score {qs['score']:.4f}",
        f"  ratio plugin / infer-check: {ratio:.2f} (target < {RATIO_TARGET}: {verdict})",
    ]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=50, help="prompts (default 50)")
    p.add_argument("--runs", type=int, default=20, help="runs per prompt (default 20)")
    p.add_argument("--max-tokens", type=int, default=32, help="generation budget (default 32)")
    p.add_argument("--concurrency", type=int, default=4, help="plugin's max_concurrency")
    p.add_argument("--repeat", type=int, default=1, help="runs per tool; the fastest is kept")
    p.add_argument("--work", type=Path, help="work folder (default: a new temporary one, kept)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    work = (args.work or Path(tempfile.mkdtemp(prefix="infercheck-determinism-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average: {load_average()}; work folder {work}", flush=True)
    infer_check = ensure_infer_check()
    prompts = long_prompts(args.prompts)
    lines: list[str] = []
    with both_servers(work) as (model, gguf, llama, vllm):
        for server in (llama, vllm):
            lines += measure_server(
                server, (llama, vllm), model, gguf, prompts, args, work, infer_check
            )
    print()
    print(
        f"=== determinism: {args.prompts} prompts x {args.runs} runs x {args.max_tokens} "
        f"tokens; llama-server {' '.join(LLAMA_FLAGS)}, vllm-mlx --continuous-batching"
    )
    for line in lines:
        print(line)
    took = time.perf_counter() - started
    print(f"load average at the end: {load_average()}; took {took:.0f} s; logs in {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
