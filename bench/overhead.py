"""Part 1: the plugin's compare vs a plain mlx-lm loop vs infer-check 0.2.6, same prompts.

Every side runs in a fresh subprocess and is timed by wall clock:

- plain: ``bench/plain_loop.py`` (imports mlx-lm, loads both models, generates and scores);
  its start-up is a bare interpreter (``python -c pass``);
- plugin: ``python -m pytest -p no:cacheprovider -q`` on a generated ``infercheck.yaml``;
  its start-up is the same command with ``--collect-only`` (interpreter, pytest and its
  plugins, collection), which does not import mlx;
- infer-check: ``infer-check compare mlx:A mlx:B --prompts FILE --no-report`` from its own
  venv with ``HF_HUB_OFFLINE=1``.

"net" is a side's wall time minus its start-up: the part that grows with the work.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from common import BENCH_DIR, CACHE, PYTHON, Timed, best, long_prompts, run_timed, write_suite

INFER_CHECK_VERSION = "0.2.6"
INFER_CHECK_VENV = CACHE / "infer-check-venv"


@dataclass
class OverheadResult:
    prompts: int
    max_tokens: int
    plain: Timed
    plain_startup: Timed
    plain_stats: dict[str, Any]
    plugin: Timed
    plugin_startup: Timed
    plugin_outcome: str
    infer_check: Timed | None = None
    infer_check_stats: dict[str, Any] = field(default_factory=dict)

    @property
    def plain_net(self) -> float:
        return self.plain.seconds - self.plain_startup.seconds

    @property
    def plugin_net(self) -> float:
        return self.plugin.seconds - self.plugin_startup.seconds

    @property
    def plain_cpu_net(self) -> float:
        return self.plain.cpu_seconds - self.plain_startup.cpu_seconds

    @property
    def plugin_cpu_net(self) -> float:
        return self.plugin.cpu_seconds - self.plugin_startup.cpu_seconds


def write_matrix(work: Path, base: Path, test: Path, max_tokens: int) -> Path:
    """``infercheck.yaml`` comparing ``test`` with ``base`` on ``suite.jsonl``."""
    (work / "pytest.ini").write_text("[pytest]\n")  # rootdir here, not the repo's ini
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        f"  bf16: {{path: {json.dumps(str(base))}}}\n"
        f"  q4: {{path: {json.dumps(str(test))}, quantization: 4bit}}\n"
        "suites:\n"
        "  - ./suite.jsonl\n"
        "settings:\n"
        f"  max_tokens: {max_tokens}\n"
        "checks:\n"
        "  - compare: {baseline: bf16, test: q4}\n"
    )
    return matrix


def pytest_cmd(matrix: Path, *extra: str) -> list[str]:
    return [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-q", *extra, matrix.name]


def ensure_infer_check() -> Path:
    """The ``infer-check`` executable of its own venv (created or reused)."""
    exe = INFER_CHECK_VENV / "bin" / "infer-check"
    pip = INFER_CHECK_VENV / "bin" / "pip"
    if exe.exists():
        shown = subprocess.run(
            [str(pip), "show", "infer-check"], capture_output=True, text=True, check=False
        ).stdout
        if f"Version: {INFER_CHECK_VERSION}" in shown:
            return exe
    print(f"creating {INFER_CHECK_VENV} (infer-check {INFER_CHECK_VERSION}) ...", flush=True)
    INFER_CHECK_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run(["python3", "-m", "venv", str(INFER_CHECK_VENV)], check=True)
    subprocess.run(
        [
            str(pip),
            "install",
            "-q",
            "--disable-pip-version-check",
            f"infer-check=={INFER_CHECK_VERSION}",
            "mlx[cpu]" if sys.platform == "linux" else "mlx",
            "mlx-lm",
        ],
        check=True,
    )
    return exe


def _infer_check_stats(out_dir: Path) -> dict[str, Any]:
    files = sorted(out_dir.glob("compare_*.json"))
    if not files:
        return {}
    data = json.loads(files[-1].read_text())
    comps = data.get("comparisons", [])
    return {
        "prompts": len(comps),
        "tokens_a": sum(len(c["baseline"]["tokens"]) for c in comps),
        "tokens_b": sum(len(c["test"]["tokens"]) for c in comps),
    }


def _outcome(run: Timed) -> str:
    lines = [line for line in run.stdout.strip().splitlines() if line.strip()]
    return lines[-1].strip("= ") if lines else "?"


def measure(
    base: Path,
    test: Path,
    prompts: list[str],
    max_tokens: int,
    *,
    repeat: int = 1,
    infer_check: bool = True,
    profile: Path | None = None,
) -> OverheadResult:
    with tempfile.TemporaryDirectory(prefix="infercheck-bench-") as tmp:
        work = Path(tmp)
        write_suite(work / "suite.jsonl", prompts, max_tokens)
        matrix = write_matrix(work, base, test, max_tokens)
        plain_cmd = [
            str(PYTHON),
            str(BENCH_DIR / "plain_loop.py"),
            str(base),
            str(test),
            str(work / "suite.jsonl"),
            str(max_tokens),
        ]
        # Warm-up (page cache, mlx's first-use costs), not timed.
        warm = work / "warm.jsonl"
        write_suite(warm, long_prompts(1), 8)
        run_timed([*plain_cmd[:4], str(warm), "8"], work)

        plains, plain_starts, plugins, plugin_starts = [], [], [], []
        for _ in range(repeat):
            plain_starts.append(run_timed([str(PYTHON), "-c", "pass"], work))
            plains.append(run_timed(plain_cmd, work))
            plugin_starts.append(run_timed(pytest_cmd(matrix, "--collect-only"), work))
            plugins.append(run_timed(pytest_cmd(matrix), work, ok_codes=(0, 1)))
        plain = best(plains)
        result = OverheadResult(
            prompts=len(prompts),
            max_tokens=max_tokens,
            plain=plain,
            plain_startup=best(plain_starts),
            plain_stats=json.loads(plain.stdout.strip().splitlines()[-1]),
            plugin=best(plugins),
            plugin_startup=best(plugin_starts),
            plugin_outcome=_outcome(best(plugins)),
        )

        if profile is not None:
            cmd = pytest_cmd(matrix)
            run_timed(
                [cmd[0], "-m", "cProfile", "-o", str(profile), *cmd[1:]], work, ok_codes=(0, 1)
            )

        if infer_check:
            exe = ensure_infer_check()
            runs = []
            for i in range(repeat):
                out = work / f"infer-check-out-{i}"
                ic_cmd = [
                    str(exe),
                    "compare",
                    f"mlx:{base}",
                    f"mlx:{test}",
                    "--prompts",
                    str(work / "suite.jsonl"),
                    "--no-report",
                    "--output",
                    str(out),
                ]
                runs.append((run_timed(ic_cmd, work, env={"HF_HUB_OFFLINE": "1"}), out))
            ic, out = min(runs, key=lambda r: r[0].seconds)
            result.infer_check = ic
            result.infer_check_stats = _infer_check_stats(out)
        return result


def profile_summary(profile: Path, top: int = 25) -> list[str]:
    """The heaviest functions of a cProfile dump, by own time and by cumulative time."""
    import io
    import pstats

    lines: list[str] = []
    views = (
        ("tottime", (top,), "everything, by own time"),
        ("cumulative", ("pytest_infercheck", top), "pytest_infercheck, by cumulative time"),
        ("tottime", ("pytest_infercheck", top), "pytest_infercheck, by own time"),
    )
    for order, restrictions, title in views:
        buf = io.StringIO()
        stats = pstats.Stats(str(profile), stream=buf)
        stats.sort_stats(order).print_stats(*restrictions)
        text = buf.getvalue()
        start = text.find("   ncalls")
        lines.append(f"--- {title}")
        lines.extend(text[start:].rstrip().splitlines())
    return lines


def versions() -> str:
    return ", ".join(f"{p} {metadata.version(p)}" for p in ("pytest", "mlx", "mlx-lm", "numpy"))
