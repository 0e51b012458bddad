"""vLLM case of the benchmark: the plugin's ``diff`` and ``determinism`` against infer-check's
``openai-compat`` backend, on the same real vLLM server.

    .venv/bin/python bench/on_vllm.py [--prompts 8] [--max-tokens 32] [--runs 3] [--repeat 3]
    .venv/bin/python bench/on_vllm.py --url http://127.0.0.1:PORT   # a vLLM already serving it

One run makes the realistic Qwen2 (random weights, real tokenizer, head size 32: what vLLM's
CPU build serves; ``examples/models/make_realistic.py``), installs vLLM's CPU build
(``scripts/install_vllm.sh``, cached), starts one float32 vLLM server on a free loopback port
(own process group, log in the work folder, always stopped; or uses ``--url``, whose access
log is then not read) and then, alternating the tools ``--repeat`` times on the same prompts
and server (the order rotating each round):

- ``diff``: the plugin's ``diff: {model: m, backends: [mlx, vllm]}`` (mlx-lm in-process
  against ``kind: vllm``, raw completions; teacher-forced on every item), the same with
  ``--infercheck-no-batching`` (every item's scorings one request after another, the path
  before ``checks/comparison/ahead.py``), the same with an empty ``INFERCHECK_CACHE`` at
  every run (``plugin, cold``: nothing kept from an earlier run, e.g. the vocabulary
  fingerprint of ``backends/vocab_fingerprint.py``), the same comparison against mlx-lm's
  outputs kept from an earlier run (``plugin, kept baseline``: a golden recorded once,
  untimed, before the rounds; ``compare: {baseline: "golden:m-mlx", test: m@vllm}``, which
  loads no mlx-lm), vs ``infer-check diff --backends mlx-lm,openai-compat --no-chat``
  (free-running top-k and text);
- ``determinism``: the plugin's ``determinism: {target: m@vllm, runs: R}`` (at
  ``--concurrency``, and with every run of every prompt in flight at once:
  ``max_concurrency`` prompts x R) vs ``infer-check determinism --backend openai-compat
  --runs R --no-chat``.

Each tool's wall time is the median of its runs, with its CPU time (user + system, the
tool's own work, less disturbed by a loaded machine); the ratios plugin / infer-check (median
of the per-round ratios, wall and CPU) are printed against the targets (diff <= 0.5,
determinism <= 0.3), with
the requests the server answered during each run (from its access log), so the work done is
visible next to the time. Not a timed test: one run, numbers side by side.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from common import MODELS_DIR, REPO, load_average, long_prompts, run_timed
from common import write_suite as write_jsonl
from http_diff import Server, _import_by_path, _on_sigterm, _script_output, free_port, serve
from overhead import INFER_CHECK_VERSION, ensure_infer_check, pytest_cmd
from stats import alternating_order, median_ratio

VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
VLLM_FLAGS = ("--dtype", "float32", "--max-model-len", "1024", "--enforce-eager")
TARGETS = {"diff": 0.5, "determinism": 0.3}
"""Issue 30's targets for plugin / infer-check."""
INFER_CHECK = "infer-check"
COLD = ", cold"
"""A plugin row whose every run starts from an empty ``INFERCHECK_CACHE`` (nothing kept
from an earlier run: the vocabulary fingerprint computed again)."""


KEPT = ", kept baseline"
"""A plugin row comparing vLLM with mlx-lm's outputs recorded in an earlier run (a golden):
no mlx-lm in the timed run."""
KEPT_MATRIX = "infercheck_kept.yaml"
RECORD_MATRIX = "infercheck_record.yaml"
IN_FLIGHT_MATRIX = "infercheck_in_flight.yaml"


@dataclass
class Runs:
    """One tool's timed runs of one case, and the server requests each made."""

    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    """user + system CPU seconds of each run (the tool's own work, less disturbed by a
    loaded machine than its wall time; the server's work is not in it)."""
    requests: list[Counter[str]] = field(default_factory=list)

    @property
    def median(self) -> float:
        return statistics.median(self.walls)

    def line(self) -> str:
        walls = ", ".join(f"{w:.2f}" for w in self.walls)
        cpu = statistics.median(self.cpus)
        work = dict(self.requests[-1]) if self.requests and self.requests[-1] else "not read"
        return (
            f"median {self.median:7.2f} s (runs: {walls}), CPU {cpu:.2f} s; "
            f"server requests per run: {work}"
        )


@dataclass
class ExternalServer:
    """A vLLM started by someone else (``--url``): no access log to read."""

    url: str

    def log_offset(self) -> int:
        return 0

    def log_since(self, offset: int) -> str:
        return ""


def _requests(server: Server | ExternalServer, offset: int) -> Counter[str]:
    """The POST requests the server logged since ``offset``, by path."""
    counts: Counter[str] = Counter()
    for line in server.log_since(offset).splitlines():
        if '"POST /' in line:
            counts[line.split('"POST ', 1)[1].split(" ", 1)[0]] += 1
    return counts


def _matrix(
    work: Path,
    model: Path,
    url: str,
    check: str,
    max_tokens: int,
    c: int,
    name: str = "infercheck.yaml",
) -> Path:
    (work / "pytest.ini").write_text("[pytest]\n")
    matrix = work / name
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


def _kept_baseline(case: Path, model: Path, url: str, args: argparse.Namespace) -> list[str]:
    """The diff's comparison against a baseline kept from an earlier run: mlx-lm's outputs
    recorded once, here, untimed, as a golden in ``case/goldens`` (``compare`` with
    ``--infercheck-record``: its continuations, scored teacher-forced, top ``golden_top_k``
    logprobs a position); the command compares vLLM with it (``golden-top-k-lower-bound``)
    and loads no mlx-lm."""
    check = 'compare: {baseline: "golden:m-mlx", test: m@mlx}'
    record = _matrix(case, model, url, check, args.max_tokens, args.concurrency, RECORD_MATRIX)
    run_timed(pytest_cmd(record, "--infercheck-record"), case, env={"HF_HUB_OFFLINE": "1"})
    check = 'compare: {baseline: "golden:m-mlx", test: m@vllm}'
    kept = _matrix(case, model, url, check, args.max_tokens, args.concurrency, KEPT_MATRIX)
    return pytest_cmd(kept)


def _case(
    name: str,
    tools: dict[str, Sequence[str | Path]],
    work: Path,
    server: Server | ExternalServer,
    repeat: int,
) -> list[str]:
    """Each of ``tools`` (label -> command) run ``repeat`` times, the order rotating each
    round (so a slow spell of the machine hits all); the ratios of every plugin row to
    infer-check, paired by round."""
    runs = {label: Runs() for label in tools}
    for i, order in enumerate(alternating_order(list(tools), repeat)):
        for label in order:
            print(f"{name} round {i + 1}/{repeat}: {label} ...", flush=True)
            offset = server.log_offset()
            env = {"HF_HUB_OFFLINE": "1"}
            if label.endswith(COLD):  # nothing kept from an earlier run (a fresh cache)
                env["INFERCHECK_CACHE"] = tempfile.mkdtemp(prefix="cold-", dir=work)
            timed = run_timed(tools[label], work, env=env, ok_codes=(0, 1))
            time.sleep(0.3)  # the server's last access-log lines
            runs[label].walls.append(timed.seconds)
            runs[label].cpus.append(timed.cpu_seconds)
            runs[label].requests.append(_requests(server, offset))
    lines = [f"{name}:"]
    lines += [f"  {label + ':':<28} {r.line()}" for label, r in runs.items()]
    reference = runs[INFER_CHECK].walls
    for label, r in runs.items():
        if label == INFER_CHECK:
            continue
        ratio = median_ratio(r.walls, reference)
        target = (
            TARGETS[name] if label.startswith("plugin") and "one at a time" not in label else None
        )
        verdict = "" if target is None else (" ok" if ratio <= target else " ABOVE TARGET")
        aim = "" if target is None else f" (target <= {target}:{verdict})"
        cpu = median_ratio(r.cpus, runs[INFER_CHECK].cpus)
        lines.append(
            f"  ratio {label} / infer-check (median of paired rounds): {ratio:.2f}{aim}; "
            f"CPU {cpu:.2f}"
        )
    return lines


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=8, help="prompts (default 8)")
    p.add_argument("--max-tokens", type=int, default=32, help="generation budget (default 32)")
    p.add_argument("--runs", type=int, default=3, help="determinism runs per prompt (default 3)")
    p.add_argument("--concurrency", type=int, default=4, help="plugin's max_concurrency")
    p.add_argument("--repeat", type=int, default=3, help="rounds, tools alternating (default 3)")
    p.add_argument("--work", type=Path, help="work folder (default: a new temporary one, kept)")
    p.add_argument("--url", help="a vLLM already serving the model (not started here)")
    p.add_argument(
        "--cases", nargs="+", default=["diff", "determinism"], choices=["diff", "determinism"]
    )
    return p.parse_args(argv)


@contextlib.contextmanager
def _server(args: argparse.Namespace, model: Path, work: Path) -> Iterator[Server | ExternalServer]:
    if args.url:
        yield ExternalServer(args.url.rstrip("/"))
        return
    vllm_python = _script_output("install_vllm.sh")
    port = free_port()
    command: list[str | Path] = [
        vllm_python,
        *("-m", "vllm.entrypoints.openai.api_server", "--model", model),
        *("--host", "127.0.0.1", "--port", str(port), *VLLM_FLAGS),
    ]
    print(f"model {model}; starting vLLM ...", flush=True)
    # vLLM's /health answers with an empty body: wait for its model list instead.
    ready = lambda doc: isinstance(doc, dict)  # noqa: E731
    with serve("vllm", command, port, work, ready, env=VLLM_ENV, health="/v1/models") as server:
        yield server


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
    prompts = long_prompts(args.prompts)
    suite = work / "suite.jsonl"
    write_jsonl(suite, prompts, args.max_tokens)
    lines: list[str] = []
    with _server(args, model, work) as server:
        common = ["--model", model, "--prompts", suite, "--max-tokens", str(args.max_tokens)]
        cases = {
            "diff": (
                "diff: {model: m, backends: [mlx, vllm]}",
                ["diff", "--backends", "mlx-lm,openai-compat", "--base-urls", f",{server.url}"],
            ),
            "determinism": (
                f"determinism: {{target: m@vllm, runs: {args.runs}}}",
                [
                    *("determinism", "--backend", "openai-compat"),
                    *("--base-url", server.url, "--runs", str(args.runs)),
                ],
            ),
        }
        for name in args.cases:
            check, ic_args = cases[name]
            case = work / name
            case.mkdir(exist_ok=True)
            (case / "suite.jsonl").write_text(suite.read_text())
            matrix = _matrix(case, model, server.url, check, args.max_tokens, args.concurrency)
            tools: dict[str, Sequence[str | Path]] = {"plugin": pytest_cmd(matrix)}
            if name == "diff":
                tools["plugin" + COLD] = pytest_cmd(matrix)
                tools["plugin one at a time"] = pytest_cmd(matrix, "--infercheck-no-batching")
                tools["plugin" + KEPT] = _kept_baseline(case, model, server.url, args)
            if name == "determinism":
                every = args.prompts * args.runs
                matrix = _matrix(
                    case, model, server.url, check, args.max_tokens, every, IN_FLIGHT_MATRIX
                )
                tools[f"plugin, max_concurrency {every}"] = pytest_cmd(matrix)
            out = case / "ic"
            tools[INFER_CHECK] = [infer_check, *ic_args, *common, "--no-chat", "--output", out]
            lines += _case(name, tools, case, server, args.repeat)
    print()
    print(
        f"=== vLLM {' '.join(VLLM_FLAGS)}: {args.prompts} prompts x {args.max_tokens} tokens, "
        f"determinism {args.runs} runs, plugin max_concurrency {args.concurrency}; "
        f"infer-check {INFER_CHECK_VERSION} openai-compat on the same server"
    )
    for line in lines:
        print(line)
    print(f"load average after: {load_average()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
