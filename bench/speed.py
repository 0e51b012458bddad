"""Speed benchmark of issue 12: the plugin against infer-check 0.2.6 and a plain batched loop.

    .venv/bin/python bench/speed.py                 # the issue's scenarios, 3 rounds
    .venv/bin/python bench/speed.py --rounds 5 --scenarios compare:20x256 diff:20x64

Scenarios (``KIND:PROMPTSxTOKENS``; defaults: :data:`DEFAULT_SCENARIOS`):

- ``compare``: random tiny llama bf16 vs its 4-bit (screened prompts, see ``prompts.py``);
- ``sweep``: the same bf16 against three levels (8, 4 and 3 bits);
- ``compare152k``: the realistic tiny Qwen3 (151,936-token vocabulary, float32; see
  ``examples/models/make_realistic.py``) vs its 4-bit;
- ``diff``: llama-server ``-np 4`` vs vllm-mlx ``--continuous-batching`` serving the random
  tiny llama (the servers and prompts of ``http_diff.py``).

Tools, each a fresh subprocess timed from spawn to exit (start-up included):

- ``plugin``: ``python -m pytest -p no:cacheprovider -q infercheck.yaml`` (batched and
  lockstep where the plugin does it; over HTTP: ``max_concurrency: 4``);
- ``plugin 1-at-a-time``: the same with ``--infercheck-no-batching`` (when the plugin has
  that option; the report says if not); over HTTP: ``max_concurrency: 1``;
- ``infer-check``: ``infer-check compare|sweep|diff`` 0.2.6 from its own venv;
- ``plain batched``: ``plain_batched.py`` (mlx-lm ``BatchGenerator`` + right-padded batched
  teacher-forced scoring); over HTTP ``plain_http.py`` (the same requests, 4 in flight);
- over HTTP also ``plugin start-up`` and ``infer-check start-up``: both on 1 prompt x 1
  token (interpreter, imports, collection, readiness, one request per server).

The tools run in rounds, their order rotated each round (``stats.alternating_order``);
a ratio is the median over rounds of the paired ratio (``stats.median_ratio``). Peak memory
is each subprocess's own peak RSS (``/usr/bin/time -f %M``). The load average is printed
before and after every scenario. See bench/README.md, section "Speed (issue 12)".
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import http_diff
from common import (
    BENCH_DIR,
    MODELS_DIR,
    PYTHON,
    REPO,
    Timed,
    ensure_bytecode,
    escaped,
    load_average,
    long_prompts,
    mb,
    run_timed,
    write_suite,
)
from overhead import INFER_CHECK_VERSION, ensure_infer_check, pytest_cmd
from overhead import _infer_check_stats as overhead_stats
from stats import Sample, alternating_order, median_ratio, summarize

DEFAULT_SCENARIOS = ("compare:20x256", "compare:50x128", "sweep:50x128", "diff:20x64")
DEFAULT_152K = "compare152k:20x64"
KINDS = ("compare", "sweep", "compare152k", "diff")
NO_BATCHING_FLAG = "--infercheck-no-batching"
SWEEP_BITS = (8, 4, 3)
TARGETS = {"compare": 0.3, "sweep": 0.3, "compare152k": 0.3, "diff": 0.5}
"""Issue 12's targets for plugin / infer-check (wall, start-up included)."""
PLAIN_TARGET = 1.15
"""Issue 12's target for plugin / plain batched loop (compare and sweep)."""

PLUGIN, UNBATCHED, INFER_CHECK, PLAIN = (
    "plugin",
    "plugin 1-at-a-time",
    "infer-check",
    "plain batched",
)
PLUGIN_START, IC_START = "plugin start-up", "infer-check start-up"


@dataclass(frozen=True)
class Scenario:
    """``KIND:PROMPTSxTOKENS``, e.g. ``compare:20x256``."""

    kind: str
    prompts: int
    max_tokens: int

    @classmethod
    def parse(cls, text: str) -> Scenario:
        kind, _, size = text.partition(":")
        prompts, _, tokens = size.partition("x")
        if kind not in KINDS or not prompts.isdigit() or not tokens.isdigit():
            raise argparse.ArgumentTypeError(
                f"{text!r}: expected KIND:PROMPTSxTOKENS with KIND one of {', '.join(KINDS)}"
            )
        return cls(kind, int(prompts), int(tokens))

    def __str__(self) -> str:
        return f"{self.kind} {self.prompts} x {self.max_tokens}"


@dataclass
class Command:
    """How to run one tool of a scenario."""

    cmd: list[str | Path]
    cwd: Path
    env: dict[str, str] = field(default_factory=dict)
    ok_codes: tuple[int, ...] = (0, 1)


@dataclass
class ScenarioResult:
    scenario: Scenario
    title: str
    runs: dict[str, list[Sample]]
    notes: list[str]
    outputs: dict[str, str]
    load_before: str
    load_after: str


# --------------------------------------------------------------------------- models


def _quiet(fn: Callable[[], Any]) -> Any:
    with contextlib.redirect_stdout(io.StringIO()):
        return fn()


def tiny_models(bits: Sequence[int]) -> tuple[Path, list[Path]]:
    """The random tiny llama (bf16) and its quantizations at ``bits``."""
    make_models = http_diff._import_by_path(
        REPO / "examples" / "models" / "make_models.py", "infercheck_make_models"
    )
    random_dir = _quiet(lambda: make_models.make_random_model(MODELS_DIR, seed=0))
    variants = _quiet(
        lambda: make_models.make_variants(
            MODELS_DIR / "random-s0", bits=tuple(bits), group_size=32, source=random_dir
        )
    )
    return Path(variants["bf16"]), [Path(variants[f"q{b}"]) for b in bits]


def qwen_152k() -> tuple[Path, Path]:
    """The realistic tiny Qwen3 (float32, 151,936 ids; as the repo's ``conftest.py`` makes
    it) and its 4-bit quantization (``make_variants``: its ``tiny-bf16`` is the float32
    model copied as it is)."""
    examples = REPO / "examples" / "models"
    realistic = http_diff._import_by_path(examples / "make_realistic.py", "infercheck_realistic")
    make_models = http_diff._import_by_path(examples / "make_models.py", "infercheck_make_models")
    cache = Path.home() / ".cache" / "pytest-infercheck" / "models" / "realistic" / "qwen3-s0"
    model = _quiet(lambda: realistic.make_realistic(cache, "qwen35", seed=0))
    variants = _quiet(
        lambda: make_models.make_variants(
            MODELS_DIR / "qwen3-s0", bits=(4,), group_size=32, source=Path(model.path)
        )
    )
    return Path(model.path), Path(variants["q4"])


# --------------------------------------------------------------------------- in-process


def _matrix(work: Path, kind: str, base: Path, tests: Sequence[Path], max_tokens: int) -> Path:
    names = [f"t{i}" for i in range(len(tests))]
    models = "".join(
        f"  {n}: {{path: {json.dumps(str(t))}}}\n" for n, t in zip(names, tests, strict=True)
    )
    check = (
        "  - compare: {baseline: base, test: t0}\n"
        if kind != "sweep"
        else f"  - sweep: {{baseline: base, models: [{', '.join(names)}]}}\n"
    )
    (work / "pytest.ini").write_text("[pytest]\n")
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        f"  base: {{path: {json.dumps(str(base))}}}\n"
        f"{models}"
        "suites:\n  - ./suite.jsonl\n"
        f"settings:\n  max_tokens: {max_tokens}\n"
        f"checks:\n{check}"
    )
    return matrix


def _in_process_commands(
    s: Scenario, work: Path, base: Path, tests: list[Path], prompts: list[str], unbatched: bool
) -> dict[str, Command]:
    write_suite(work / "suite.jsonl", prompts, s.max_tokens)
    matrix = _matrix(work, s.kind, base, tests, s.max_tokens)
    exe = ensure_infer_check()
    if s.kind == "sweep":
        labels = ",".join([f"base=mlx:{base}", *(f"t{i}=mlx:{t}" for i, t in enumerate(tests))])
        ic: list[str | Path] = [exe, "sweep", "--models", labels, "--baseline", "base"]
    else:
        ic = [exe, "compare", f"mlx:{base}", f"mlx:{tests[0]}", "--no-report"]
    ic += ["--prompts", work / "suite.jsonl", "--max-tokens", str(s.max_tokens)]
    ic += ["--output", work / "infer-check-out"]
    commands = {
        PLUGIN: Command([*pytest_cmd(matrix)], work),
        INFER_CHECK: Command(ic, work, {"HF_HUB_OFFLINE": "1"}, (0,)),
        PLAIN: Command(
            [
                PYTHON,
                BENCH_DIR / "plain_batched.py",
                work / "suite.jsonl",
                str(s.max_tokens),
                base,
                *tests,
            ],
            work,
            ok_codes=(0,),
        ),
    }
    if unbatched:
        commands[UNBATCHED] = Command([*pytest_cmd(matrix, NO_BATCHING_FLAG)], work)
    return commands


def plugin_accepts(flag: str, work: Path) -> bool:
    """Whether ``pytest --help`` (with the plugin loaded) lists ``flag``."""
    help_text = run_timed([PYTHON, "-m", "pytest", "--help"], work, ok_codes=(0, 1, 4)).stdout
    return flag in help_text


# --------------------------------------------------------------------------- rounds


def _ic_said(summary: dict[str, Any]) -> str:
    """infer-check's numbers from its JSON output (its terminal tables show model output)."""
    return ", ".join(
        f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
    )


def run_rounds(
    commands: dict[str, Command], rounds: int, label: str
) -> tuple[dict[str, list[Sample]], dict[str, str]]:
    """Every tool once per round, in :func:`~stats.alternating_order`; the samples per tool
    and each tool's last stdout line (what it reported)."""
    runs: dict[str, list[Sample]] = {tool: [] for tool in commands}
    last: dict[str, str] = {}
    for r, order in enumerate(alternating_order(list(commands), rounds)):
        for tool in order:
            c = commands[tool]
            print(f"  {label} round {r + 1}/{rounds}: {tool} ...", flush=True)
            t: Timed = run_timed(c.cmd, c.cwd, env=c.env, ok_codes=c.ok_codes)
            runs[tool].append(Sample(t.seconds, t.cpu_seconds, t.peak_rss))
            said = [line for line in t.stdout.splitlines() if line.strip()]
            last[tool] = said[-1].strip("= ") if said else ""
    return runs, last


def in_process(s: Scenario, rounds: int, unbatched: bool) -> ScenarioResult:
    load_before = load_average()
    notes: list[str] = []
    if s.kind == "compare152k":
        base, test = qwen_152k()
        tests = [test]
        prompts = long_prompts(s.prompts)
        title = f"{s}: realistic tiny Qwen3 (V = 151,936, float32) vs its 4-bit"
        notes.append("prompts not screened (an EOS is 1 in 151,936 on random weights)")
    else:
        from prompts import screened_prompts

        bits = SWEEP_BITS if s.kind == "sweep" else (4,)
        base, tests = tiny_models(bits)
        q4 = tests[bits.index(4)]
        prompts, note = screened_prompts(base, q4, s.prompts, s.max_tokens)
        levels = ", ".join(f"{b}-bit" for b in bits)
        title = f"{s}: random tiny llama bf16 vs {levels}"
        notes.append(f"prompts {note} (bf16 and 4-bit)")
    with tempfile.TemporaryDirectory(prefix="infercheck-speed-") as tmp:
        commands = _in_process_commands(s, Path(tmp), base, tests, prompts, unbatched)
        runs, last = run_rounds(commands, rounds, str(s))
        last[INFER_CHECK] = _ic_said(overhead_stats(Path(tmp) / "infer-check-out"))
        if PLAIN in last:
            with contextlib.suppress(ValueError):
                plain = json.loads(last[PLAIN])
                last[PLAIN] = (
                    f"generated {plain['tokens']} tokens, scored {plain['scored_positions']} "
                    f"positions per model; mean KL {[round(k, 5) for k in plain['mean_kl']]}; "
                    f"last run: import {plain['import_s']:.2f} s, load {plain['load_s']:.2f} s, "
                    "batched generation "
                    + " + ".join(f"{g:.2f}" for g in plain["generate_s_each"])
                    + f" s (baseline first), scoring {plain['score_s']:.2f} s"
                )
    return ScenarioResult(s, title, runs, notes, last, load_before, load_average())


# --------------------------------------------------------------------------- HTTP diff


def diff(s: Scenario, rounds: int, work: Path) -> ScenarioResult:
    load_before = load_average()
    exe = ensure_infer_check()
    with http_diff.both_servers(work) as (model, gguf, llama, vllm):
        print("  screening prompts that run to max tokens on both servers ...", flush=True)
        prompts, tried = http_diff.screened_prompts(
            llama, vllm, str(model), s.prompts, s.max_tokens
        )
        urls = (llama.url, vllm.url)

        def setup(name: str, texts: list[str], max_tokens: int, c: int) -> Path:
            d = work / name
            d.mkdir(exist_ok=True)
            write_suite(d / "suite.jsonl", texts, max_tokens)
            http_diff.write_matrix(d, model, gguf, urls, c, max_tokens)
            return d

        c4, c1 = (
            setup("plugin-c4", prompts, s.max_tokens, 4),
            setup("plugin-c1", prompts, s.max_tokens, 1),
        )
        ic_dir, start = setup("ic", prompts, s.max_tokens, 4), setup("start", prompts[:1], 1, 4)
        env = {"HF_HUB_OFFLINE": "1"}
        commands = {
            PLUGIN: Command([*pytest_cmd(c4 / "infercheck.yaml")], c4),
            UNBATCHED: Command([*pytest_cmd(c1 / "infercheck.yaml")], c1),
            INFER_CHECK: Command(
                http_diff._infer_check_cmd(
                    exe, model, urls, ic_dir / "suite.jsonl", s.max_tokens, ic_dir / "out"
                ),
                ic_dir,
                env,
                (0,),
            ),
            PLAIN: Command(
                [
                    PYTHON,
                    BENCH_DIR / "plain_http.py",
                    *urls,
                    str(model),
                    ic_dir / "suite.jsonl",
                    str(s.max_tokens),
                    "4",
                ],
                ic_dir,
                ok_codes=(0,),
            ),
            PLUGIN_START: Command([*pytest_cmd(start / "infercheck.yaml")], start),
            IC_START: Command(
                http_diff._infer_check_cmd(
                    exe, model, urls, start / "suite.jsonl", 1, start / "out"
                ),
                start,
                env,
                (0,),
            ),
        }
        runs, last = run_rounds(commands, rounds, str(s))
        last[INFER_CHECK] = _ic_said(http_diff.infer_check_summary(ic_dir / "out"))
        last[IC_START] = ""
    notes = [
        f"prompts: the first {len(prompts)} of {tried} candidates that run to "
        f"{s.max_tokens} tokens on both servers",
        "plugin: max_concurrency 4; plugin 1-at-a-time: max_concurrency 1; plain batched: "
        "plain_http.py, 4 requests in flight",
        "start-up rows: the same commands on 1 prompt x 1 token",
    ]
    title = f"{s}: llama-server -np 4 vs vllm-mlx --continuous-batching (random tiny llama)"
    return ScenarioResult(s, title, runs, notes, last, load_before, load_average())


# --------------------------------------------------------------------------- report


def report(r: ScenarioResult) -> list[str]:
    """The scenario's table: per tool the median wall and CPU time, peak RSS, every wall,
    and the paired median ratios to infer-check and to the plain batched loop."""
    rounds = len(next(iter(r.runs.values())))
    lines = [
        f"=== {r.title}; {rounds} rounds",
        f"  load average before {r.load_before}; after {r.load_after}",
        *(f"  {n}" for n in r.notes),
        f"  {'tool':<22}{'wall':>8}{'cpu':>8}{'peak RSS':>12}  {'/ infer-check':>13}"
        f"{'/ plain':>9}  walls",
    ]
    for tool, samples in r.runs.items():
        t = summarize(tool, samples)
        walls = [s.wall_s for s in samples]
        vs_ic = median_ratio(walls, [s.wall_s for s in r.runs[INFER_CHECK]])
        vs_plain = median_ratio(walls, [s.wall_s for s in r.runs[PLAIN]])
        lines.append(
            f"  {tool:<22}{t.wall_s:7.2f}s{t.cpu_s:7.2f}s{mb(t.peak_rss):>12}  "
            f"{vs_ic:12.2f}x{vs_plain:8.2f}x  {', '.join(f'{w:.2f}' for w in t.walls)}"
        )
    ic = [s.wall_s for s in r.runs[INFER_CHECK]]
    ratio = median_ratio([s.wall_s for s in r.runs[PLUGIN]], ic)
    target = TARGETS[r.scenario.kind]
    verdict = "ok" if ratio <= target else "ABOVE TARGET"
    lines.append(f"  plugin / infer-check {ratio:.2f}x (target <= {target}: {verdict})")
    if r.scenario.kind != "diff":
        to_plain = median_ratio(
            [s.wall_s for s in r.runs[PLUGIN]], [s.wall_s for s in r.runs[PLAIN]]
        )
        verdict = "ok" if to_plain <= PLAIN_TARGET else "ABOVE TARGET"
        lines.append(
            f"  plugin / plain batched {to_plain:.2f}x (target <= {PLAIN_TARGET}: {verdict})"
        )
    else:
        plugin_net = [
            a.wall_s - b.wall_s for a, b in zip(r.runs[PLUGIN], r.runs[PLUGIN_START], strict=True)
        ]
        ic_net = [
            a.wall_s - b.wall_s for a, b in zip(r.runs[INFER_CHECK], r.runs[IC_START], strict=True)
        ]
        net = f"{median_ratio(plugin_net, ic_net):.2f}x" if min(ic_net) > 0 else "n/a"
        lines.append(f"  net of start-up (each round's 1 x 1 run subtracted): {net}")
    lines += [f"  {tool} said: {escaped(text)}" for tool, text in r.outputs.items() if text]
    return lines


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--scenarios",
        nargs="+",
        type=Scenario.parse,
        default=[Scenario.parse(x) for x in (*DEFAULT_SCENARIOS, DEFAULT_152K)],
        help=f"KIND:PROMPTSxTOKENS ... (default: {' '.join(DEFAULT_SCENARIOS)} {DEFAULT_152K})",
    )
    p.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    p.add_argument("--work", type=Path, help="work folder of the HTTP scenario (server logs)")
    p.add_argument("--json", type=Path, help="write every sample to this JSON file")
    args = p.parse_args(argv)
    if args.rounds < 3:
        print("note: fewer than 3 rounds; the issue asks for the median of at least 3")
    return args


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop servers


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    package = ensure_bytecode()
    print(f"load average: {load_average()}; plugin {package} (byte-compiled)", flush=True)
    with tempfile.TemporaryDirectory(prefix="infercheck-speed-help-") as tmp:
        (Path(tmp) / "pytest.ini").write_text("[pytest]\n")
        unbatched = plugin_accepts(NO_BATCHING_FLAG, Path(tmp))
    results: list[ScenarioResult] = []
    failed: list[str] = []
    for s in args.scenarios:
        print(f"scenario {s} ...", flush=True)
        try:
            if s.kind == "diff":
                work = args.work or Path(tempfile.mkdtemp(prefix="infercheck-speed-diff-"))
                work.mkdir(parents=True, exist_ok=True)
                results.append(diff(s, args.rounds, work.resolve()))
            else:
                results.append(in_process(s, args.rounds, unbatched))
        except (RuntimeError, OSError, ValueError) as exc:  # the others still run
            failed.append(f"=== {s}: FAILED: {escaped(str(exc))[-3000:]}")
            print(failed[-1], flush=True)
    print()
    print(
        f"=== speed benchmark (infer-check {INFER_CHECK_VERSION}; python {sys.version.split()[0]})"
    )
    if not unbatched:
        print(
            f"note: the plugin has no {NO_BATCHING_FLAG} option: no 'plugin 1-at-a-time' row "
            "for compare and sweep (the plugin row is how the plugin runs by default)"
        )
    for r in results:
        for line in report(r):
            print(line)
    for line in failed:
        print(line)
    print(f"load average at the end: {load_average()}; took {time.perf_counter() - started:.0f} s")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {
                        "scenario": str(r.scenario),
                        "runs": {t: [vars(x) for x in v] for t, v in r.runs.items()},
                        "load_before": r.load_before,
                        "load_after": r.load_after,
                    }
                    for r in results
                ],
                indent=1,
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
