"""HTTP case of the benchmark: the plugin's diff vs infer-check's diff on two real servers.

    .venv/bin/python bench/http_diff.py [--prompts 20] [--max-tokens 64] [--concurrency 4]

One run prepares a random-weight tiny llama (mlx folder + f32 GGUF), starts llama-server and
vllm-mlx on free loopback ports (each in its own process group, logs in the work folder,
always stopped at the end), picks long-answer prompts that run to max tokens on both servers,
then times, on the same prompts and servers:

- the plugin: ``python -m pytest -q -p no:cacheprovider infercheck.yaml`` with
  ``diff: {model: m, backends: [llama, vllm]}`` (raw completions, ``max_concurrency: C``),
  at C = ``--concurrency`` and at C = 1;
- infer-check: ``infer-check diff --model DIR --backends llama-cpp,vllm-mlx --base-urls ...
  --no-chat``, from its own venv.

Each is run ``--repeat`` times and the fastest run is kept. Generated tokens per run are
read from the servers' logs, so the work done by each tool is visible. See bench/README.md,
section "HTTP diff".
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    MODELS_DIR,
    REPO,
    Timed,
    ensure_bytecode,
    load_average,
    long_prompts,
    run_timed,
)
from common import write_suite as write_jsonl
from overhead import INFER_CHECK_VERSION, ensure_infer_check, pytest_cmd

SEED = 0
RATIO_TARGET = 0.5
STARTUP_TIMEOUT_S = 300.0
MAX_CANDIDATES_PER_PROMPT = 20
LLAMA_FLAGS = ("-np", "4", "-c", "4096", "-t", "2")
# The tiny llama's config says max_position_embeddings 64, which its GGUF records as the
# training context; llama-server caps each slot's context at it ("request (81 tokens) exceeds
# the available context size (64 tokens)"). Raised as metadata only: RoPE has no limit.
LLAMA_CONTEXT_OVERRIDE = ("--override-kv", "llama.context_length=int:4096")


# --------------------------------------------------------------------------- model and tools


def _import_by_path(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def prepare_model() -> tuple[Path, Path]:
    """``(mlx_dir, gguf)``: the random tiny llama (bf16) and its f32 GGUF, cached."""
    examples = REPO / "examples" / "models"
    make_models = _import_by_path(examples / "make_models.py", "infercheck_make_models")
    make_gguf = _import_by_path(examples / "make_gguf.py", "infercheck_make_gguf")
    with contextlib.redirect_stdout(io.StringIO()):
        model_dir = Path(make_models.make_random_model(MODELS_DIR, seed=SEED))
    gguf = Path(make_gguf.make_gguf(model_dir, MODELS_DIR / f"{model_dir.name}-f32.gguf"))
    return model_dir.resolve(), gguf.resolve()


def _script_output(script: str) -> Path:
    """Run a repo script that prints an executable's path on its last stdout line."""
    proc = subprocess.run(
        ["bash", str(REPO / "scripts" / script)], stdout=subprocess.PIPE, text=True, check=True
    )
    return Path(proc.stdout.strip().splitlines()[-1])


# --------------------------------------------------------------------------- servers


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http_json(url: str, body: Mapping[str, Any] | None = None, timeout: float = 120.0) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:500]
        raise RuntimeError(f"{url}: HTTP {exc.code}: {detail}") from exc


@dataclass
class Server:
    name: str
    url: str
    log: Path
    proc: subprocess.Popen[bytes]

    def log_offset(self) -> int:
        return self.log.stat().st_size

    def log_since(self, offset: int) -> str:
        with self.log.open("rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def tail(self, lines: int = 30) -> str:
        return "\n".join(self.log_since(0).splitlines()[-lines:])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group, SIGKILL after 15 s."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 5.0)):
        if proc.poll() is not None:
            break
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(wait_s)
    with contextlib.suppress(ProcessLookupError):  # leftovers of the group, if any
        os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def serve(
    name: str,
    cmd: Sequence[str | Path],
    port: int,
    work: Path,
    ready: Callable[[Any], bool],
    env: Mapping[str, str] | None = None,
    health: str = "/health",
) -> Iterator[Server]:
    """Start ``cmd`` in its own process group, wait until ``ready(GET <health>)`` (a JSON
    document), stop it."""
    log = work / f"{name}.log"
    full_env = {**os.environ, **(env or {})}
    with log.open("wb") as log_file:
        proc = subprocess.Popen(
            [str(c) for c in cmd],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
    server = Server(name, f"http://127.0.0.1:{port}", log, proc)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{name} exited with {proc.returncode} while starting; log {log}:\n"
                    + server.tail()
                )
            with contextlib.suppress(OSError, ValueError, RuntimeError):
                if ready(http_json(server.url + health, timeout=5.0)):
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {STARTUP_TIMEOUT_S:.0f} s; log {log}")
            time.sleep(0.5)
        yield server
    finally:
        _stop(proc)


# --------------------------------------------------------------------------- prompts


def _llama_length(url: str, prompt: str, max_tokens: int) -> int:
    """Tokens llama-server generates for ``prompt`` (BOS added, as both tools send it)."""
    body = {"prompt": prompt, "n_predict": max_tokens, "temperature": 0, "cache_prompt": False}
    answer = http_json(url + "/completion", body)
    return int(answer["tokens_predicted"]) if answer.get("stop_type") == "limit" else -1


def _vllm_length(url: str, model: str, prompt: str, max_tokens: int) -> int:
    """Tokens vllm-mlx generates for ``prompt`` (raw completion)."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}
    choice = http_json(url + "/v1/completions", body)["choices"][0]
    return max_tokens if choice.get("finish_reason") == "length" else -1


def screened_prompts(
    llama: Server, vllm: Server, model: str, n: int, max_tokens: int
) -> tuple[list[str], int]:
    """The first ``n`` long-answer prompts that run to ``max_tokens`` on both servers
    (sequential greedy requests), and how many candidates were tried."""
    kept: list[str] = []
    candidates = long_prompts(n * MAX_CANDIDATES_PER_PROMPT)
    for tried, text in enumerate(candidates, 1):
        # vllm-mlx adds no BOS to a raw prompt. Both tools send it the text as it is (so its
        # prompt lacks the BOS llama-server adds); "<s>" + text is what would match llama's
        # prompt. Both must run to max tokens, so the choice holds if the plugin sends BOS.
        if _llama_length(llama.url, text, max_tokens) == max_tokens and all(
            _vllm_length(vllm.url, model, p, max_tokens) == max_tokens for p in (text, "<s>" + text)
        ):
            kept.append(text)
            if len(kept) == n:
                return kept, tried
    raise RuntimeError(f"only {len(kept)} of {len(candidates)} prompts run to {max_tokens} tokens")


# --------------------------------------------------------------------------- the two tools


def write_matrix(
    work: Path, model: Path, gguf: Path, urls: tuple[str, str], c: int, max_tokens: int
) -> Path:
    """``infercheck.yaml``: diff llama-server (baseline) vs vllm-mlx on ``suite.jsonl``."""
    (work / "pytest.ini").write_text("[pytest]\n")  # rootdir here, not the repo's ini
    matrix = work / "infercheck.yaml"
    matrix.write_text(
        "models:\n"
        f"  m: {{path: {json.dumps(str(model))}, gguf: {json.dumps(str(gguf))}}}\n"
        "backends:\n"
        f"  llama: {{kind: llama-server, url: {json.dumps(urls[0])}, max_concurrency: {c}}}\n"
        f"  vllm: {{kind: vllm-mlx, url: {json.dumps(urls[1])}, chat: false, "
        f"max_concurrency: {c}}}\n"
        "suites:\n"
        "  - ./suite.jsonl\n"
        "settings:\n"
        f"  max_tokens: {max_tokens}\n"
        "checks:\n"
        "  - diff: {model: m, backends: [llama, vllm]}\n"
    )
    return matrix


@dataclass
class ToolRun:
    """One timed run of a tool and the tokens the servers generated meanwhile."""

    timed: Timed
    out: Path
    tokens: dict[str, int]
    requests: dict[str, int]


@dataclass
class Best:
    runs: list[ToolRun] = field(default_factory=list)

    @property
    def best(self) -> ToolRun:
        return min(self.runs, key=lambda r: r.timed.seconds)

    def walls(self) -> str:
        return ", ".join(f"{r.timed.seconds:.2f}" for r in self.runs)


_LLAMA_EVAL = re.compile(r"\|\s+eval time =.*?/\s*(\d+) tokens")
_VLLM_TOKENS = re.compile(r"Completion: \d+ prompt \+ (\d+) completion tokens")


def _server_work(
    servers: Sequence[Server], offsets: Sequence[int]
) -> tuple[dict[str, int], dict[str, int]]:
    """Generated tokens and completed requests per server since ``offsets`` (from the logs)."""
    tokens: dict[str, int] = {}
    requests: dict[str, int] = {}
    for server, offset in zip(servers, offsets, strict=True):
        text = server.log_since(offset)
        pattern = _LLAMA_EVAL if server.name == "llama-server" else _VLLM_TOKENS
        found = [int(m) for m in pattern.findall(text)]
        tokens[server.name], requests[server.name] = sum(found), len(found)
    return tokens, requests


def timed_run(
    cmd: Sequence[str | Path],
    cwd: Path,
    out: Path,
    servers: Sequence[Server],
    env: Mapping[str, str] | None = None,
) -> ToolRun:
    offsets = [s.log_offset() for s in servers]
    timed = run_timed(cmd, cwd, env=env, ok_codes=(0, 1))
    time.sleep(0.3)  # let the servers flush their last log lines
    tokens, requests = _server_work(servers, offsets)
    return ToolRun(timed, out, tokens, requests)


def plugin_summary(junit: Path) -> dict[str, Any]:
    """Items, outcomes and per-prompt metrics of a plugin run, from its JUnit XML."""
    cases = list(ET.parse(junit).getroot().iter("testcase"))
    items: list[dict[str, str]] = []
    failed = 0
    for case in cases:
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        failed += any(child.tag in ("failure", "error") for child in case)
        if "infercheck_similarity" in props:
            items.append(props)
    sims = [float(p["infercheck_similarity"]) for p in items]
    return {
        "items": len(cases),
        "comparisons": len(items),
        "failed": failed,
        "methods": dict(Counter(p["infercheck_method"] for p in items)),
        "severities": dict(Counter(p["infercheck_severity"] for p in items)),
        "flips": dict(Counter(p["infercheck_flip"] for p in items)),
        "mean_similarity": statistics.fmean(sims) if sims else float("nan"),
    }


def infer_check_summary(out: Path) -> dict[str, Any]:
    """Comparisons and metrics of an infer-check diff run, from its JSON output."""
    files = sorted(out.glob("diff_*.json"))
    if not files:
        return {"comparisons": 0}
    comps = json.loads(files[-1].read_text())
    sims = [float(c["text_similarity"]) for c in comps]
    kls = [c["kl_divergence"] for c in comps if c.get("kl_divergence") is not None]
    return {
        "comparisons": len(comps),
        "failures": sum(bool(c.get("is_failure")) for c in comps),
        "flips": sum(bool(c.get("metadata", {}).get("flipped")) for c in comps),
        "identical": sum(c["baseline"]["text"] == c["test"]["text"] for c in comps),
        "mean_similarity": statistics.fmean(sims) if sims else float("nan"),
        "kl_values": len(kls),
    }


# --------------------------------------------------------------------------- main


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--prompts", type=int, default=20, help="prompts (default 20)")
    p.add_argument("--max-tokens", type=int, default=64, help="generation budget (default 64)")
    p.add_argument(
        "--concurrency", type=int, default=4, help="plugin's max_concurrency (default 4)"
    )
    p.add_argument("--repeat", type=int, default=3, help="runs per tool; the fastest is kept")
    p.add_argument("--work", type=Path, help="work folder (default: a new temporary one, kept)")
    return p.parse_args(argv)


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally blocks that stop the servers


@contextlib.contextmanager
def both_servers(work: Path) -> Iterator[tuple[Path, Path, Server, Server]]:
    """``(model, gguf, llama, vllm)``: the random tiny llama served by llama-server
    (:data:`LLAMA_FLAGS`) and vllm-mlx (``--continuous-batching``) on free loopback ports,
    logs in ``work``, both stopped on exit."""
    model, gguf = prepare_model()
    llama_bin = _script_output("build_llama_server.sh")
    vllm_bin = _script_output("install_vllm_mlx.sh")
    hub = work / "hub"  # vllm-mlx's HF_HUB_CACHE: must exist, stays empty
    hub.mkdir(exist_ok=True)
    p_llama, p_vllm = free_port(), free_port()
    local = ("--host", "127.0.0.1", "--port")
    print(f"model {model} (+ {gguf.name}); starting llama-server and vllm-mlx ...", flush=True)
    with (
        serve(
            "llama-server",
            [llama_bin, "-m", gguf, *local, str(p_llama), *LLAMA_FLAGS, *LLAMA_CONTEXT_OVERRIDE],
            p_llama,
            work,
            lambda h: isinstance(h, dict) and h.get("status") == "ok",
        ) as llama,
        serve(
            "vllm-mlx",
            [vllm_bin, "serve", model, *local, str(p_vllm), "--continuous-batching"],
            p_vllm,
            work,
            lambda h: isinstance(h, dict) and bool(h.get("model_loaded")),
            env={"HF_HUB_CACHE": str(hub), "PYTHONUNBUFFERED": "1"},
        ) as vllm,
    ):
        yield model, gguf, llama, vllm


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = time.perf_counter()
    work = args.work or Path(tempfile.mkdtemp(prefix="infercheck-http-diff-"))
    work.mkdir(parents=True, exist_ok=True)
    work = work.resolve()
    print(f"load average: {load_average()}; work folder {work}", flush=True)

    infer_check = ensure_infer_check()
    ensure_bytecode()  # the plugin starts up as an installed package does (see common.py)
    with both_servers(work) as (model, gguf, llama, vllm):
        servers = (llama, vllm)
        print("screening prompts that run to max tokens on both servers ...", flush=True)
        prompts, tried = screened_prompts(llama, vllm, str(model), args.prompts, args.max_tokens)
        lines = _measure(args, work, model, gguf, servers, prompts, infer_check)
        lines.insert(
            1,
            f"  prompts: the first {len(prompts)} of {tried} candidates that run "
            f"to {args.max_tokens} tokens on both servers (sequential requests)",
        )
    print()
    print(
        f"=== HTTP diff: llama-server vs vllm-mlx, {args.prompts} prompts x {args.max_tokens} "
        f"tokens"
    )
    for line in lines:
        print(line)
    took = time.perf_counter() - started
    print(f"load average at the end: {load_average()}; took {took:.0f} s; logs in {work}")
    return 0


def _infer_check_cmd(
    exe: Path, model: Path, urls: Sequence[str], suite: Path, max_tokens: int, out: Path
) -> list[str | Path]:
    """``infer-check diff``: ``--model`` is the folder vllm-mlx serves (its model name, which
    vllm-mlx checks; llama-cpp sends it as an ignored ``model`` field and loads its tokenizer
    to look for a chat template: none here, so both get the text as it is)."""
    return [
        exe,
        "diff",
        "--model",
        model,
        "--backends",
        "llama-cpp,vllm-mlx",
        "--base-urls",
        ",".join(urls),
        "--prompts",
        suite,
        "--no-chat",
        "--max-tokens",
        str(max_tokens),
        "--output",
        out,
    ]


def _work_line(run: ToolRun) -> str:
    return ", ".join(
        f"{name} {run.requests[name]} requests / {run.tokens[name]} tokens" for name in run.tokens
    )


def _measure(
    args: argparse.Namespace,
    work: Path,
    model: Path,
    gguf: Path,
    servers: tuple[Server, Server],
    prompts: list[str],
    infer_check: Path,
) -> list[str]:
    urls = (servers[0].url, servers[1].url)
    c_top = args.concurrency
    levels = sorted({c_top, 1}, reverse=True)
    ic_env = {"HF_HUB_OFFLINE": "1"}

    def setup(name: str, texts: list[str], max_tokens: int, c: int) -> Path:
        d = work / name
        d.mkdir(exist_ok=True)
        write_jsonl(d / "suite.jsonl", texts, max_tokens)
        write_matrix(d, model, gguf, urls, c, max_tokens)
        return d

    plugin_dirs = {c: setup(f"plugin-c{c}", prompts, args.max_tokens, c) for c in levels}
    ic_dir = setup("infer-check", prompts, args.max_tokens, c_top)
    # Start-up: the same commands on 1 prompt x 1 token (interpreter, imports, collection,
    # health checks, one request per server).
    start_dir = setup("startup", prompts[:1], 1, c_top)

    plugin = {c: Best() for c in levels}
    ic, plugin_start, ic_start = Best(), Best(), Best()
    for i in range(args.repeat):
        for c in levels:
            print(f"run {i + 1}/{args.repeat}: plugin, max_concurrency {c} ...", flush=True)
            junit = plugin_dirs[c] / f"junit-{i}.xml"
            cmd: list[str | Path] = [
                *pytest_cmd(plugin_dirs[c] / "infercheck.yaml", f"--junitxml={junit.name}")
            ]
            plugin[c].runs.append(timed_run(cmd, plugin_dirs[c], junit, servers))
        print(f"run {i + 1}/{args.repeat}: infer-check ...", flush=True)
        out = ic_dir / f"out-{i}"
        cmd = _infer_check_cmd(
            infer_check, model, urls, ic_dir / "suite.jsonl", args.max_tokens, out
        )
        ic.runs.append(timed_run(cmd, ic_dir, out, servers, env=ic_env))
        print(f"run {i + 1}/{args.repeat}: start-up of both (1 prompt x 1 token) ...", flush=True)
        junit = start_dir / f"junit-{i}.xml"
        cmd = [*pytest_cmd(start_dir / "infercheck.yaml", f"--junitxml={junit.name}")]
        plugin_start.runs.append(timed_run(cmd, start_dir, junit, servers))
        out = start_dir / f"out-{i}"
        cmd = _infer_check_cmd(infer_check, model, urls, start_dir / "suite.jsonl", 1, out)
        ic_start.runs.append(timed_run(cmd, start_dir, out, servers, env=ic_env))

    top, ic_best = plugin[c_top].best, ic.best
    ratio = top.timed.seconds / ic_best.timed.seconds
    verdict = "ok" if ratio <= RATIO_TARGET else "ABOVE TARGET"
    flags = " ".join((*LLAMA_FLAGS, *LLAMA_CONTEXT_OVERRIDE))
    lines = [f"servers: llama-server {flags}; vllm-mlx --continuous-batching"]
    for c in levels:
        b = plugin[c].best
        s = plugin_summary(b.out)
        lines += [
            f"plugin, max_concurrency {c}: {b.timed.seconds:6.2f} s wall "
            f"(runs: {plugin[c].walls()}); servers did: {_work_line(b)}",
            f"  produced {s['items']} items ({s['failed']} failed): {s['comparisons']} "
            f"comparisons + 1 aggregate, methods {s['methods']}, severities "
            f"{s['severities']}, mean similarity {s['mean_similarity']:.3f}, flips {s['flips']}",
        ]
    ics = infer_check_summary(ic_best.out)
    lines += [
        f"infer-check {INFER_CHECK_VERSION} diff: {ic_best.timed.seconds:6.2f} s wall "
        f"(runs: {ic.walls()}); servers did: {_work_line(ic_best)}",
        f"  produced {ics.get('comparisons')} comparisons: {ics.get('identical')} identical "
        f"texts, mean similarity {ics.get('mean_similarity', float('nan')):.3f}, "
        f"{ics.get('failures')} failures, {ics.get('flips')} flips, "
        f"{ics.get('kl_values')} KL values",
        f"ratio plugin (max_concurrency {c_top}) / infer-check: {ratio:.2f} wall-to-wall "
        f"(target <= {RATIO_TARGET}: {verdict})",
    ]
    if c_top != 1:
        one = plugin[1].best.timed.seconds
        lines.append(
            f"concurrency lever: plugin at max_concurrency 1 {one:.2f} s -> at {c_top} "
            f"{top.timed.seconds:.2f} s ({one / top.timed.seconds:.2f}x faster)"
        )
    ps, ics_s = plugin_start.best.timed.seconds, ic_start.best.timed.seconds
    net_p, net_ic = top.timed.seconds - ps, ic_best.timed.seconds - ics_s
    lines.append(
        f"start-up (same commands, 1 prompt x 1 token): plugin {ps:.2f} s, infer-check "
        f"{ics_s:.2f} s; net of it: plugin {net_p:.2f} s / infer-check {net_ic:.2f} s = "
        f"{net_p / net_ic:.2f}"
    )
    return lines


if __name__ == "__main__":
    raise SystemExit(main())
