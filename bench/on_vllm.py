"""vLLM case of the benchmark: the plugin's ``diff`` and ``determinism`` against infer-check's
``openai-compat`` backend, on the same real vLLM server.

    .venv/bin/python bench/on_vllm.py [--prompts 12] [--max-tokens 48] [--runs 5] [--repeat 3]

One run makes the realistic Qwen2 (random weights, real tokenizer, head size 32: what vLLM's
CPU build serves; ``examples/models/make_realistic.py``), installs vLLM's CPU build
(``scripts/install_vllm.sh``, cached), starts one float32 vLLM server on a free loopback port
(own process group, log in the work folder, always stopped) and then, alternating the two
tools ``--repeat`` times on the same prompts and server:

- ``diff``: the plugin's ``diff: {model: m, backends: [mlx, vllm]}`` (mlx-lm in-process
  against ``kind: vllm``, raw completions; teacher-forced on every item) vs ``infer-check diff
  --backends mlx-lm,openai-compat --no-chat`` (free-running top-k and text);
- ``determinism``: the plugin's ``determinism: {target: m@vllm, runs: R}`` vs ``infer-check
  determinism --backend openai-compat --runs R --no-chat``.

Each tool's wall time is the median of its runs; the ratio plugin / infer-check is printed
with the requests the server answered during each run (from its access log), so the work done
is visible next to the time. Not a timed test: one run, numbers side by side.
"""

from __future__ import annotations

import argparse
import json
import signal
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common import MODELS_DIR, REPO, load_average, long_prompts, run_timed
from common import write_suite as write_jsonl
from http_diff import Server, _import_by_path, _on_sigterm, _script_output, free_port, serve
from overhead import INFER_CHECK_VERSION, ensure_infer_check, pytest_cmd

VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
VLLM_FLAGS = ("--dtype", "float32", "--max-model-len", "1024", "--enforce-eager")


@dataclass
class Runs:
    """One tool's timed runs of one case, and the server requests each made."""

    walls: list[float] = field(default_factory=list)
    requests: list[Counter[str]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    def line(self) -> str:
        walls = ", ".join(f"{w:.2f}" for w in self.walls)
        work = dict(self.requests[-1]) if self.requests else {}
        return f"median {self.median:7.2f} s (runs: {walls}); server requests per run: {work}"


def _requests(server: Server, offset: int) -> Counter[str]:
    """The POST requests the server logged since ``offset``, by path."""
    counts: Counter[str] = Counter()
    for line in server.log_since(offset).splitlines():
        if '"POST /' in line:
            counts[line.split('"POST ', 1)[1].split(" ", 1)[0]] += 1
    return counts


def _matrix(work: Path, model: Path, url: str, check: str, max_tokens: int, c: int) -> Path:
    (work / "pytest.ini").write_text("[pytest]\n")
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        f"  m: {{path: {json.dumps(str(model))}}}\n"
        "backends:\n"
        "  mlx: {kind: mlx-lm}\n"
        f"  vllm: {{kind: vllm, url: {json.dumps(url)}, chat: false, max_concurrency: {c}}}\n"
        "suites:\n"
        "  - ./suite.jsonl\n"
        "settings:\n"
        f"  max_tokens: {max_tokens}\n"
        "checks:\n"
        f"  - {check}\n"
    )
    return matrix


def _case(
    name: str,
    plugin_cmd: Sequence[str | Path],
    ic_cmd: Sequence[str | Path],
    work: Path,
    server: Server,
    repeat: int,
) -> list[str]:
    plugin, ic = Runs(), Runs()
    for i in range(repeat):  # alternating, so that a slow spell of the machine hits both
        for label, runs, cmd in (("plugin", plugin, plugin_cmd), ("infer-check", ic, ic_cmd)):
            print(f"{name} run {i + 1}/{repeat}: {label} ...", flush=True)
            offset = server.log_offset()
            env = {"HF_HUB_OFFLINE": "1"}
            timed = run_timed(cmd, work, env=env, ok_codes=(0, 1))
            time.sleep(0.3)  # the server's last access-log lines
            runs.walls.append(timed.seconds)
            runs.requests.append(_requests(server, offset))
    ratio = plugin.median / ic.median
    return [
        f"{name}:",
        f"  plugin:      {plugin.line()}",
        f"  infer-check: {ic.line()}",
        f"  ratio plugin / infer-check (medians): {ratio:.2f}",
    ]


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=12, help="prompts (default 12)")
    p.add_argument("--max-tokens", type=int, default=48, help="generation budget (default 48)")
    p.add_argument("--runs", type=int, default=5, help="determinism runs per prompt (default 5)")
    p.add_argument("--concurrency", type=int, default=4, help="plugin's max_concurrency")
    p.add_argument("--repeat", type=int, default=3, help="runs per tool, alternating (default 3)")
    p.add_argument("--work", type=Path, help="work folder (default: a new temporary one, kept)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    work = (args.work or Path(tempfile.mkdtemp(prefix="infercheck-vllm-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    print(f"load average: {load_average()}; work folder {work}", flush=True)
    make_realistic = _import_by_path(
        REPO / "examples" / "models" / "make_realistic.py", "infercheck_make_realistic"
    )
    model = make_realistic.make_realistic(MODELS_DIR / "realistic-qwen2", "qwen2", seed=0).path
    infer_check = ensure_infer_check()
    vllm_python = _script_output("install_vllm.sh")
    prompts = long_prompts(args.prompts)
    suite = work / "suite.jsonl"
    write_jsonl(suite, prompts, args.max_tokens)
    port = free_port()
    command = [
        vllm_python,
        *("-m", "vllm.entrypoints.openai.api_server", "--model", model),
        *("--host", "127.0.0.1", "--port", str(port), *VLLM_FLAGS),
    ]
    print(f"model {model}; starting vLLM ...", flush=True)
    lines: list[str] = []
    # vLLM's /health answers with an empty body: wait for its model list instead.
    ready = lambda doc: isinstance(doc, dict)  # noqa: E731
    with serve("vllm", command, port, work, ready, env=VLLM_ENV, health="/v1/models") as server:
        common = ["--model", model, "--prompts", suite, "--max-tokens", str(args.max_tokens)]
        for name, check, ic_args in (
            (
                "diff",
                "diff: {model: m, backends: [mlx, vllm]}",
                ["diff", "--backends", "mlx-lm,openai-compat", "--base-urls", f",{server.url}"],
            ),
            (
                "determinism",
                f"determinism: {{target: m@vllm, runs: {args.runs}}}",
                [
                    *("determinism", "--backend", "openai-compat"),
                    *("--base-url", server.url, "--runs", str(args.runs)),
                ],
            ),
        ):
            case = work / name
            case.mkdir(exist_ok=True)
            (case / "suite.jsonl").write_text(suite.read_text())
            matrix = _matrix(case, model, server.url, check, args.max_tokens, args.concurrency)
            plugin_cmd = pytest_cmd(matrix)
            ic_cmd = [infer_check, *ic_args, *common, "--no-chat", "--output", case / "ic"]
            lines += _case(name, plugin_cmd, ic_cmd, case, server, args.repeat)
    print()
    print(
        f"=== vLLM {' '.join(VLLM_FLAGS)}: {args.prompts} prompts x {args.max_tokens} tokens; "
        f"infer-check {INFER_CHECK_VERSION} openai-compat on the same server"
    )
    for line in lines:
        print(line)
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
