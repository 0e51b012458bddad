"""Shared helpers of the benchmark: paths, timed subprocesses, prompts, formatting."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH_DIR = REPO / "bench"
CACHE = Path.home() / ".cache" / "pytest-infercheck" / "bench"
MODELS_DIR = CACHE / "models"
PYTHON = Path(sys.executable)
TIME = Path("/usr/bin/time")


@dataclass(frozen=True)
class Timed:
    """One subprocess: wall time from spawn to exit, exit code and captured output."""

    seconds: float
    cpu_seconds: float
    """user + system CPU time of the process and its children (less sensitive to load)."""
    returncode: int
    stdout: str
    stderr: str
    peak_rss: int = 0
    """The process's peak resident set size in bytes (``/usr/bin/time``'s ``%M``)."""


def run_timed(
    cmd: Sequence[str | Path],
    cwd: Path,
    *,
    env: Mapping[str, str] | None = None,
    ok_codes: Sequence[int] = (0,),
) -> Timed:
    """Run ``cmd`` and time it (wall clock), with its CPU time (``wait4``) and peak RSS
    (``/usr/bin/time -f %M``); raise with its output if the exit code is bad. When the
    command exits non-zero ``/usr/bin/time`` adds a line before %M: the last line is read."""
    full_env = dict(os.environ)
    full_env.pop("PYTEST_ADDOPTS", None)
    full_env.pop("PYTEST_PLUGINS", None)
    # As on a user's machine: bytecode kept, pytest's rewritten plugin modules among it (with
    # PYTHONDONTWRITEBYTECODE set, each run rewrites every plugin module changed since its
    # last cached rewrite again: 0.2 s of a 1.5 s determinism run).
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)
    if env:
        full_env.update(env)
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r") as rss,
    ):
        # /usr/bin/time reports its child's own peak RSS (%M, KiB). wait4's ru_maxrss of a
        # child forked from this process is at least this process's peak at the fork (Linux
        # keeps the pre-exec high-water mark), so it is only the fallback.
        wrap = [TIME, "-f", "%M", "-o", rss.name] if TIME.exists() else []
        started = time.perf_counter()
        proc = subprocess.Popen(
            [*map(str, wrap), *map(str, cmd)], cwd=cwd, env=full_env, stdout=out, stderr=err
        )
        _, status, usage = os.wait4(proc.pid, 0)  # this child's rusage (its children's too)
        seconds = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
        reported = rss.read().strip().splitlines()
    cpu = usage.ru_utime + usage.ru_stime
    if wrap and reported and reported[-1].isdigit():
        peak_rss = int(reported[-1]) * 1024
    else:
        peak_rss = usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)
    if proc.returncode not in ok_codes:
        raise RuntimeError(
            f"command failed with exit code {proc.returncode}: {' '.join(map(str, cmd))}\n"
            f"--- stdout (tail)\n{stdout[-4000:]}\n--- stderr (tail)\n{stderr[-4000:]}"
        )
    return Timed(seconds, cpu, proc.returncode, stdout, stderr, peak_rss)


def best(runs: Sequence[Timed]) -> Timed:
    """The fastest of repeated runs (the least disturbed by other load)."""
    return min(runs, key=lambda r: r.seconds)


# A few topics and openings; the random-weight model ignores them and rambles until
# max_tokens, a trained model would write at length.
_TOPICS = (
    "the history of the printing press",
    "how a compiler turns source code into machine code",
    "the water cycle and why it matters for farming",
    "a lighthouse keeper who finds a message in a bottle",
    "the rules of chess, explained to a child",
    "how vaccines train the immune system",
    "a day in the life of a medieval blacksmith",
    "why the sky is blue and sunsets are red",
    "the design of a suspension bridge",
    "a detective story set on a night train",
)
_OPENINGS = (
    "Write a long, detailed essay about",
    "Tell me a long story about",
    "Explain step by step, at great length,",
    "Describe in as much detail as you can",
)


def long_prompts(n: int) -> list[str]:
    """``n`` distinct prompts that ask for long answers."""
    out = []
    for i in range(n):
        opening = _OPENINGS[i % len(_OPENINGS)]
        topic = _TOPICS[(i // len(_OPENINGS) + i) % len(_TOPICS)]
        out.append(f"{opening} {topic}. (prompt {i + 1})")
    return out


def write_suite(path: Path, prompts: Sequence[str], max_tokens: int) -> None:
    """One JSONL suite readable by both the plugin and infer-check 0.2.6.

    Both read ``id``, ``text``, ``category`` and ``max_tokens`` (the plugin takes ``text`` as
    an alias of ``prompt``). infer-check's ``--max-tokens`` does not override a line's own
    ``max_tokens`` (its default is 1024), so every line carries the budget.
    """
    with path.open("w", encoding="utf-8") as f:
        for i, text in enumerate(prompts):
            record: dict[str, str | int] = {"id": f"p{i:04d}", "text": text, "category": "bench"}
            record["max_tokens"] = max_tokens
            f.write(json.dumps(record) + "\n")


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f}, {five:.2f}, {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} cores)"


def escaped(text: str) -> str:
    """``text`` with every non-printable or non-ASCII character escaped as Python would
    (``\\x1b``, ``\\xe9``): a tool's output may hold model output, whose terminal control
    sequences must not reach the terminal."""
    return "".join(c if c.isprintable() and c.isascii() else ascii(c)[1:-1] for c in text)


def mb(n_bytes: float) -> str:
    return f"{n_bytes / 1e6:,.1f} MB"


def ensure_bytecode() -> Path:
    """Byte-compile the ``pytest_infercheck`` package the benchmark's interpreter imports,
    as installing it does, and fill pytest's cache of its assertion-rewritten modules;
    returns the package's folder.

    pytest imports every module of a plugin installed with a ``pytest11`` entry point
    through its assertion rewriter, which caches the rewritten code as
    ``__pycache__/*-pytest-X.pyc`` next to the source unless ``PYTHONDONTWRITEBYTECODE`` is
    set. On the team's machines it is set and the plugin is an editable install, so with no
    cache every pytest process re-read, re-parsed, rewrote and compiled the plugin's
    modules, while infer-check, installed by pip, loads bytecode. Here the package is
    compiled (``compileall``) and one pytest process with the variable unset imports every
    module of it from a ``conftest.py``, which writes the rewritten modules' cache; timed
    runs then read both caches (reading does not need the variable unset), as a user's
    second run does."""
    import compileall
    import importlib.util

    spec = importlib.util.find_spec("pytest_infercheck")
    if spec is None or spec.origin is None:
        raise RuntimeError("pytest_infercheck is not importable by the benchmark's interpreter")
    package = Path(spec.origin).parent
    compileall.compile_dir(package, quiet=1)
    with tempfile.TemporaryDirectory(prefix="infercheck-warm-") as tmp:
        (Path(tmp) / "pytest.ini").write_text("[pytest]\n")
        (Path(tmp) / "conftest.py").write_text(
            "import importlib, pkgutil, pytest_infercheck\n"
            "for m in pkgutil.walk_packages(pytest_infercheck.__path__, 'pytest_infercheck.'):\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except Exception:\n"
            "        pass\n"
        )
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        subprocess.run(
            [str(PYTHON), "-m", "pytest", "-p", "no:cacheprovider", "-q", "--collect-only"],
            cwd=tmp,
            env=env,
            capture_output=True,
            check=False,
        )
    return package
