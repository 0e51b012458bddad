"""Real servers for the integration tests, in one place.

- Started here (so a faulty proxy can stand in front of one): :func:`running` starts a
  command in its own process group on a free port, waits for ``/health`` while watching
  for an early exit, and stops the whole group on exit (no orphan); :func:`llama_server`
  is llama-server on the tiny GGUF with exact f32 settings.
- Started by the plugin: :func:`backend` writes a ``backends:`` entry with ``serve:``;
  :func:`vllm_serve`, :func:`llama_serve` and :data:`MLX_LM_SERVE` are the commands,
  :func:`vllm_backends` and :func:`mlx_lm_backend` the entries several tests share.
- :func:`chat_model`: a copy of the tiny adder with a chat template.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpcore  # noqa: F401  (with httpx: see pytest_infercheck/backends/http.py)
import httpx
import pytest

# The adder was trained on "<s>a+b=": a template that gives exactly that, so the chat
# endpoints and the completions endpoint see the input the model knows.
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"

HEALTH_TIMEOUT_S = 60

MLX_LM_SERVE = (
    f"{sys.executable} -m mlx_lm server --model {{model}} --host 127.0.0.1 --port {{port}}"
)


def llama_flags(slots: int, context: int) -> str:
    """llama-server flags for exact f32 results: no flash attention, f32 KV cache, 2 threads,
    ``slots`` parallel slots sharing ``context`` tokens."""
    return f"-fa off -ctk f32 -ctv f32 -np {slots} -c {context} -t 2"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def chat_model(source: Path, dest: Path) -> Path:
    """A copy of the model folder ``source`` whose tokenizer has :data:`CHAT_TEMPLATE`."""
    shutil.copytree(source, dest)
    config_path = dest / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = CHAT_TEMPLATE
    config_path.write_text(json.dumps(config, indent=2))
    return dest


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the watchdog (it stops the server's group: SIGTERM, 10 s, SIGKILL); SIGKILL
    the watchdog if it lingers past that."""
    for sig, wait_s in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def running(
    name: str,
    command: Callable[[int], list[str]],
    log_dir: Path,
    timeout_s: float = HEALTH_TIMEOUT_S,
) -> Iterator[str]:
    """Run ``command(port)`` on a free port in its own process group, logging to
    ``log_dir``; yield its URL once ``/health`` answers 200. Fails the test if it exits or
    is not healthy within ``timeout_s``; stops the group on exit."""
    port = free_port()
    log = log_dir / f"{name}-{port}.log"
    # Under the plugin's own watchdog: a test run that is killed (SIGTERM, SIGKILL: no
    # ``finally`` runs) leaves no server behind; stopping the watchdog stops the server.
    watchdog = [sys.executable, "-m", "pytest_infercheck.supervise", "--watch", str(os.getpid())]
    process = subprocess.Popen(
        [*watchdog, "--log", str(log), "--", *command(port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # own process group: killpg reaches the watchdog
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while not _healthy(url):
            if process.poll() is not None:
                pytest.fail(f"{name} exited ({process.returncode}):\n{log.read_text()[-3000:]}")
            if time.monotonic() > deadline:
                pytest.fail(f"{name} not healthy in {timeout_s} s:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield url
    finally:
        _stop(process)


@contextlib.contextmanager
def llama_server(
    binary: Path, gguf: Path, workdir: Path, flags: str, chat_template: bool = False
) -> Iterator[str]:
    """llama-server on ``gguf`` with ``flags`` (see :func:`llama_flags`), and with
    :data:`CHAT_TEMPLATE` (``--jinja``) if ``chat_template``; yields its URL."""
    extra: list[str] = []
    if chat_template:
        template = workdir / "chat-template.jinja"
        template.write_text(CHAT_TEMPLATE)
        extra = ["--jinja", "--chat-template-file", str(template)]

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(binary), "-m", str(gguf), *host, *flags.split(), *extra]

    with running("llama-server", command, workdir) as url:
        yield url


VLLM_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "HF_HUB_OFFLINE": "1"}
"""vLLM's CPU build: 1 GiB of KV cache, no hub."""
VLLM_FLAGS = "--dtype float32 --max-model-len 1024 --enforce-eager"
"""vLLM flags for exact float32 results on CPU (no graph capture: starts in about 25 s)."""
VLLM_TOOL_FLAGS = "--enable-auto-tool-choice --tool-call-parser hermes"
"""vLLM's tool calling for Hermes / Qwen 2.5 templates (``<tool_call>{...}</tool_call>``)."""
VLLM_HEALTH_TIMEOUT_S = 240
"""vLLM's CPU build is healthy in 21-32 s alone, longer beside other work on 2 cores."""


def vllm_cpu_command(python: Path, flags: str = VLLM_FLAGS) -> str:
    """The command line of vLLM's OpenAI server from the venv of ``scripts/install_vllm.sh``
    (``vllm serve`` does not run from the ``vllm-cpu`` distribution), with ``{model}`` and
    ``{port}`` placeholders (a ``serve:`` command) and ``flags``."""
    return (
        f"{python} -m vllm.entrypoints.openai.api_server --model {{model}} "
        f"--host 127.0.0.1 --port {{port}} {flags}"
    )


def llama_serve(binary: Path, flags: str) -> str:
    """The ``serve:`` command of llama-server with ``flags``."""
    return f"{binary} -m {{model}} --host 127.0.0.1 --port {{port}} {flags}"


def vllm_serve(binary: Path, flags: str = "") -> str:
    """The ``serve:`` command of vllm-mlx; ``flags`` start with a space."""
    return f"{binary} serve {{model}} --host 127.0.0.1 --port {{port}}{flags}"


def backend(
    name: str, kind: str, serve: str, env: dict[str, str] | None = None, **options: object
) -> str:
    """A ``backends:`` entry (indented for the matrix) the plugin starts with ``serve``;
    ``options`` in order before it, ``env`` after it."""
    lines = [f"  {name}:", f"    kind: {kind}"]
    lines += [f"    {key}: {json.dumps(value)}" for key, value in options.items()]
    lines.append(f'    serve: "{serve}"')
    if env:
        lines.append("    env: {" + ", ".join(f"{k}: '{v}'" for k, v in env.items()) + "}")
    return "".join(line + "\n" for line in lines)


def llama_at(url: str, **options: object) -> str:
    """The ``backends:`` entry ``llama``: the llama-server at ``url``, with ``options``."""
    fields = [f"url: '{url}'", *(f"{key}: {json.dumps(value)}" for key, value in options.items())]
    return "  llama: {kind: llama-server, " + ", ".join(fields) + "}\n"


def vllm_backends(binary: Path, hub: Path, **cb_options: object) -> str:
    """``vllm`` (simple engine, concurrent requests wait for the lock instead of HTTP 503)
    and ``vllmcb`` (``--continuous-batching``, with ``cb_options``): raw completions, their
    HF cache in ``hub``."""
    return backend(
        "vllm",
        "vllm-mlx",
        vllm_serve(binary),
        {"VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait", "HF_HUB_CACHE": str(hub)},
        chat=False,
    ) + backend(
        "vllmcb",
        "vllm-mlx",
        vllm_serve(binary, " --continuous-batching"),
        {"HF_HUB_CACHE": str(hub)},
        chat=False,
        **cb_options,
    )


def mlx_lm_backend(hub: Path) -> str:
    """``mlxserver``: mlx_lm.server as an OpenAI backend, raw completions."""
    return backend("mlxserver", "openai", MLX_LM_SERVE, {"HF_HUB_CACHE": str(hub)}, chat=False)
