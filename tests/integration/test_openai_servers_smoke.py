"""Real OpenAI-compatible servers on the tiny adder: vllm-mlx 0.6.0 and mlx_lm.server.

Each server is started for real (its own process group, killed in a ``finally``), asked for
greedy ``/v1/completions`` of 8 fixed sums, and its texts are compared with mlx-lm's greedy
``generate_step`` in this process. vllm-mlx is installed (idempotently) into its own lean
virtual environment by ``scripts/install_vllm_mlx.sh``. Nothing is skipped: a server that
cannot be installed or started is a failure. Facts behind the assertions:
``examples/models/SERVERS.md``.

BOS: the tiny tokenizer does not add BOS by itself, and neither server adds it for a raw
completion prompt (``usage.prompt_tokens`` counts the prompt's bytes only), while the model
was trained on ``<s>a+b=``. Both servers parse the literal text ``<s>`` as the BOS special
token, so the prompt sent is ``"<s>" + prompt``, which must equal mlx-lm on ``[BOS] + ids``.
The plain prompt is sent too: it must equal mlx-lm on ``ids`` without BOS (different, mostly
wrong answers), which pins down that the servers do not prepend BOS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.generate import generate_step

REPO = Path(__file__).resolve().parents[2]
INSTALL_SCRIPT = REPO / "scripts" / "install_vllm_mlx.sh"

BOS_ID = 1
EOS_ID = 2
PAIRS = [(37, 48), (12, 34), (99, 99), (7, 8), (81, 9), (1, 0), (50, 25), (63, 97)]
PROMPTS = [f"{a}+{b}=" for a, b in PAIRS]
MAX_TOKENS = 8
HEALTH_TIMEOUT_S = 120.0
INSTALL_TIMEOUT_S = 1800.0
LOG_TAIL_LINES = 60


# --------------------------------------------------------------------------- reference


@dataclass(frozen=True)
class Reference:
    with_bos: list[str]
    without_bos: list[str]
    prompt_lengths: list[int]
    """Token count of each prompt without BOS (one token per byte)."""


@pytest.fixture(scope="module")
def reference(tiny_models: dict[str, Path]) -> Reference:
    """mlx-lm greedy texts (up to EOS, EOS excluded) with and without BOS prepended."""
    model, tokenizer = mlx_lm.load(str(tiny_models["bf16"]))

    def greedy(ids: list[int]) -> str:
        out: list[int] = []
        for token, _ in generate_step(
            mx.array(ids), model, max_tokens=MAX_TOKENS, sampler=lambda lp: mx.argmax(lp, -1)
        ):
            if int(token) == EOS_ID:
                break
            out.append(int(token))
        return str(tokenizer.decode(out))

    encoded = [list(tokenizer.encode(p)) for p in PROMPTS]
    assert all(ids[0] != BOS_ID for ids in encoded), "the tokenizer now adds BOS itself"
    return Reference(
        with_bos=[greedy([BOS_ID, *ids]) for ids in encoded],
        without_bos=[greedy(ids) for ids in encoded],
        prompt_lengths=[len(ids) for ids in encoded],
    )


# --------------------------------------------------------------------------- servers


@pytest.fixture(scope="session")
def vllm_mlx_executable() -> Path:
    """The ``vllm-mlx`` executable from the install script (last line of its stdout)."""
    try:
        done = subprocess.run(
            ["bash", str(INSTALL_SCRIPT)],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{INSTALL_SCRIPT.name} did not finish in {exc.timeout} s")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        tail = "\n".join(done.stderr.splitlines()[-LOG_TAIL_LINES:])
        pytest.fail(f"{INSTALL_SCRIPT.name} failed (exit {done.returncode}):\n{tail}")
    path = Path(lines[-1])
    assert path.is_absolute() and os.access(path, os.X_OK), path
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    name: str
    base_url: str
    log_path: Path
    process: subprocess.Popen[bytes]

    def log_tail(self) -> str:
        """The log's last lines, without the access-log lines of our /health polling."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError as exc:
            return f"(no log: {exc})"
        lines = [line for line in lines if "GET /health" not in line]
        return "\n".join(lines[-LOG_TAIL_LINES:])

    def fail(self, message: str) -> NoReturn:
        pytest.fail(f"{self.name}: {message}\n--- {self.log_path} (tail) ---\n{self.log_tail()}")


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the server's process group, SIGKILL it if it lingers."""
    for sig, wait_s in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


HealthCheck = Callable[[int, Any], str]
"""``(status code, JSON body) -> "ready" | "starting" | "failed"``."""


def _wait_healthy(server: Server, health_check: HealthCheck) -> dict[str, Any]:
    deadline = time.monotonic() + HEALTH_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline:
        code = server.process.poll()
        if code is not None:
            server.fail(f"exited with code {code} before it was healthy")
        try:
            r = httpx.get(f"{server.base_url}/health", timeout=2.0, trust_env=False)
            last = f"HTTP {r.status_code}: {r.text[:300]}"
            state = health_check(r.status_code, r.json())
        except (httpx.HTTPError, ValueError) as exc:
            last, state = repr(exc), "starting"
        if state == "ready":
            body: dict[str, Any] = r.json()
            return body
        if state == "failed":
            server.fail(f"/health says it failed: {last}")
        time.sleep(0.25)
    server.fail(f"not healthy after {HEALTH_TIMEOUT_S} s (last: {last})")


@contextlib.contextmanager
def running_server(
    name: str,
    command: Callable[[int], list[str]],
    env: dict[str, str],
    log_dir: Path,
    health_check: HealthCheck,
) -> Iterator[tuple[Server, dict[str, Any]]]:
    """Start ``command(port)`` in its own process group; yield it once /health is ready.

    The port comes from the kernel just before the start; if another process takes it in
    between (the log says the address is in use), a new port is tried, up to 3 times.
    """
    for attempt in range(3):
        port = free_port()
        log_path = log_dir / f"{name}-{attempt}.log"
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                command(port),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=log_dir,
                start_new_session=True,  # own process group: killpg reaches its children
            )
        server = Server(name, f"http://127.0.0.1:{port}", log_path, process)
        try:
            try:
                health = _wait_healthy(server, health_check)
            except pytest.fail.Exception:
                if attempt < 2 and "address already in use" in server.log_tail().lower():
                    continue
                raise
            yield server, health
            return
        finally:
            _kill_group(process)


def server_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    hf_cache = tmp_path / "hf-cache"  # mlx_lm.server's /v1/models scans it: it must exist
    hf_cache.mkdir(exist_ok=True)
    env = dict(os.environ)
    env.update(HF_HUB_CACHE=str(hf_cache), HF_HUB_OFFLINE="1", PYTHONUNBUFFERED="1", **extra)
    return env


# --------------------------------------------------------------------------- requests


def complete(client: httpx.Client, server: Server, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"{server.base_url}/v1/completions", json=body)
    if r.status_code != 200:
        server.fail(f"/v1/completions {body} -> HTTP {r.status_code}: {r.text[:500]}")
    data: dict[str, Any] = r.json()
    return data


def check_completions(
    server: Server, model: str | None, reference: Reference, serialized: bool
) -> None:
    """8 greedy completions with ``<s>`` (= mlx-lm with BOS) and the same prompts without it
    (= mlx-lm without BOS: the server adds no BOS), sent one at a time; then the ``<s>``
    prompts again, all at once: every one must succeed, and when the engine runs requests
    one at a time (``serialized``) the texts must be the sequential ones.

    Batching engines are not held to that: on vllm-mlx ``--continuous-batching``, 8-way
    concurrency turned ``1+0=`` from ``1`` into ``2`` in 12 of 30 runs (the model's top two
    logprobs there differ by 0.03 in bf16; ``--max-num-seqs 1`` gave 0 of 30), a real
    batching divergence but not a deterministic one. mlx_lm.server gave 0 of 30.
    """

    def body(prompt: str) -> dict[str, Any]:
        b: dict[str, Any] = {"prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0}
        if model is not None:
            b["model"] = model
        return b

    with httpx.Client(timeout=60.0, trust_env=False) as client:
        with_bos = [complete(client, server, body("<s>" + p)) for p in PROMPTS]
        without_bos = [complete(client, server, body(p)) for p in PROMPTS]
        with ThreadPoolExecutor(max_workers=len(PROMPTS)) as pool:
            concurrent = list(
                pool.map(lambda p: complete(client, server, body("<s>" + p)), PROMPTS)
            )

    def texts(responses: list[dict[str, Any]]) -> list[str]:
        return [str(r["choices"][0]["text"]) for r in responses]

    problems = []
    if texts(with_bos) != reference.with_bos:
        problems.append(f"'<s>'+prompt: {texts(with_bos)} != mlx-lm {reference.with_bos}")
    if texts(without_bos) != reference.without_bos:
        problems.append(f"plain prompt: {texts(without_bos)} != mlx-lm {reference.without_bos}")
    if serialized and texts(concurrent) != texts(with_bos):
        problems.append(f"concurrent {texts(concurrent)} != sequential {texts(with_bos)}")
    # "<s>" is one token (BOS) and nothing else is added; all stopped at EOS.
    counts = [r["usage"]["prompt_tokens"] for r in with_bos]
    if counts != [n + 1 for n in reference.prompt_lengths]:
        problems.append(f"prompt_tokens with '<s>': {counts}, bytes {reference.prompt_lengths}")
    counts = [r["usage"]["prompt_tokens"] for r in without_bos]
    if counts != reference.prompt_lengths:
        problems.append(f"prompt_tokens of plain prompts: {counts} (a BOS was added?)")
    reasons = [r["choices"][0]["finish_reason"] for r in with_bos + concurrent]
    if reasons != ["stop"] * len(reasons):
        problems.append(f"finish_reason: {reasons}")
    if problems:
        server.fail("\n".join(problems))


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("engine", ["simple", "continuous-batching"])
def test_vllm_mlx_greedy_matches_mlx_lm(
    engine: str,
    vllm_mlx_executable: Path,
    tiny_models: dict[str, Path],
    reference: Reference,
    tmp_path: Path,
) -> None:
    served = "tiny-bf16"
    flags = ["--continuous-batching"] if engine == "continuous-batching" else []
    # The simple engine answers a request that arrives while another runs with HTTP 503
    # text_generation_busy unless admission is set to wait.
    env = server_env(tmp_path, VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION="wait")

    def command(port: int) -> list[str]:
        return [
            str(vllm_mlx_executable),
            "serve",
            str(tiny_models["bf16"]),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--served-model-name",
            served,
            *flags,
        ]

    def health_check(status: int, body: Any) -> str:
        # vllm-mlx loads the model before it starts listening; the flag is checked anyway.
        ready = status == 200 and isinstance(body, dict) and body.get("model_loaded") is True
        return "ready" if ready else "starting"

    with running_server(f"vllm-mlx-{engine}", command, env, tmp_path, health_check) as (
        server,
        health,
    ):
        expected_engine = "batched" if flags else "simple"
        if (health.get("status"), health.get("model_name"), health.get("engine_type")) != (
            "healthy",
            served,
            expected_engine,
        ):
            server.fail(f"/health: {health}")
        models = httpx.get(f"{server.base_url}/v1/models", timeout=10.0, trust_env=False).json()
        if [m["id"] for m in models["data"]] != [served]:
            server.fail(f"/v1/models: {models}")
        # `model` is required by vllm-mlx. Its simple engine runs one request at a time.
        check_completions(server, served, reference, serialized=not flags)


def test_mlx_lm_server_greedy_matches_mlx_lm(
    tiny_models: dict[str, Path], reference: Reference, tmp_path: Path
) -> None:
    def command(port: int) -> list[str]:
        # `python -m mlx_lm.server` works too but prints a deprecation notice.
        return [
            sys.executable,
            "-m",
            "mlx_lm",
            "server",
            "--model",
            str(tiny_models["bf16"]),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ]

    def health_check(status: int, body: Any) -> str:
        # {"status": "ok"} as soon as its generation thread runs, i.e. possibly before the
        # model is loaded (the first request waits); 503 {"status": "unavailable"} once that
        # thread has died (e.g. the model failed to load): the process stays up, so give up.
        if status == 503 and body == {"status": "unavailable"}:
            return "failed"
        return "ready" if (status, body) == (200, {"status": "ok"}) else "starting"

    with running_server("mlx_lm.server", command, server_env(tmp_path), tmp_path, health_check) as (
        server,
        _health,
    ):
        models = httpx.get(f"{server.base_url}/v1/models", timeout=10.0, trust_env=False).json()
        # The id is the resolved path (after any mlx models in the hub cache: none here).
        if [m["id"] for m in models["data"]] != [str(tiny_models["bf16"].resolve())]:
            server.fail(f"/v1/models: {models}")
        # `model` omitted: the served model (any other name than its path tries the hub).
        check_completions(server, None, reference, serialized=False)
