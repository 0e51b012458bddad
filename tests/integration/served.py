"""Helpers for the parity and cache-pollution tests: a llama-server started directly (so a
faulty proxy can stand in front of it) and a copy of the tiny adder with a chat template."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

# The adder was trained on "<s>a+b=": a template that gives exactly that, so the chat
# endpoints and the completions endpoint see the input the model knows.
CHAT_TEMPLATE = "{{ bos_token }}{% for message in messages %}{{ message['content'] }}{% endfor %}"


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


@contextmanager
def llama_server(binary: Path, gguf: Path, workdir: Path) -> Iterator[str]:
    """A llama-server on the tiny GGUF with :data:`CHAT_TEMPLATE`, exact f32 settings and
    one slot; yields its URL and stops it on exit."""
    template = workdir / "chat-template.jinja"
    template.write_text(CHAT_TEMPLATE)
    port = free_port()
    log = (workdir / f"llama-{port}.log").open("w")
    args = f"--host 127.0.0.1 --port {port} -fa off -ctk f32 -ctv f32 -np 1 -c 64 -t 2 --jinja"
    process = subprocess.Popen(
        [str(binary), "-m", str(gguf), *args.split(), "--chat-template-file", str(template)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"llama-server exited: {Path(log.name).read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("llama-server did not become healthy in 60 s")
            time.sleep(0.1)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
