"""Real servers for the integration tests: built or installed by the repo's scripts (cached
outside the repo), never mocked. A server that cannot be had fails its tests."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import MODELS_CACHE, REPO, load_example
from tests.integration.served import (
    VLLM_ENV,
    VLLM_FLAGS,
    VLLM_HEALTH_TIMEOUT_S,
    VLLM_TOOL_FLAGS,
    llama_flags,
    llama_server,
    running,
    vllm_cpu_command,
)
from tests.integration.xdist_groups import assign_groups, llama_server_built


@pytest.hookimpl(trylast=True)  # after pytest-xdist's own, whose id it replaces
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Groups for ``pytest -n N --dist loadgroup``: :mod:`tests.integration.xdist_groups`;
    while llama-server is not built yet, the modules needing it start after the others."""
    unbuilt = frozenset() if llama_server_built() else frozenset({"llama_server_bin"})
    assign_groups(config, items, unbuilt=unbuilt)


XDIST_WORKER_ENV = ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID")
"""What an xdist worker puts in its environment, which its subprocesses would inherit."""


@pytest.fixture(autouse=True)
def _inner_runs_in_a_plain_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pytest runs a test starts (``runpytest_subprocess``) get the environment of a
    plain shell, not this xdist worker's: an inherited ``PYTEST_XDIST_WORKER`` would make an
    inner run say a stress level was measured by ``gw1``."""
    for name in XDIST_WORKER_ENV:
        monkeypatch.delenv(name, raising=False)


def _script_output(script: str) -> Path:
    """Run ``scripts/<script>`` (idempotent) and return the path on its last stdout line."""
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / script)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"scripts/{script} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    return _script_output("build_llama_server.sh")


@pytest.fixture(scope="session")
def vllm_mlx_bin() -> Path:
    return _script_output("install_vllm_mlx.sh")


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The python of vLLM's CPU build (``scripts/install_vllm.sh``, cached venv)."""
    return _script_output("install_vllm.sh")


@pytest.fixture(scope="session")
def vllm_qwen2(
    vllm_python: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """THE shared vLLM server: float32 on the realistic Qwen2 (head size 32), started once per
    session (30-60 s and 3.8 GB) for every test that can share it; its ``model`` name is the
    folder's path. Tests needing other flags start their own (``serve:``). Under ``-n N``
    every worker that runs a test using it would start its own, so the modules using it go
    to one worker (:func:`pytest_collection_modifyitems`; ``scripts/test.sh`` runs ``-n 2
    --dist loadgroup``), which starts it once.

    Its Hermes tool parser (``--enable-auto-tool-choice --tool-call-parser hermes``) serves
    the structured tests; a request without tools is not touched by it. Without it, vLLM
    0.32 answers a request with tools (``tool_choice`` auto) with HTTP 400 ("auto" tool
    choice requires --enable-auto-tool-choice and --tool-call-parser to be set)."""
    workdir = tmp_path_factory.mktemp("vllm")
    model = str(realistic_qwen2.path)

    def command(port: int) -> list[str]:
        flags = f"{VLLM_FLAGS} --enable-prompt-tokens-details"  # cached_tokens in usage
        flags += f" {VLLM_TOOL_FLAGS}"
        return vllm_cpu_command(vllm_python, flags).format(model=model, port=port).split()

    with _running_with_env("vllm", command, workdir, VLLM_ENV, VLLM_HEALTH_TIMEOUT_S) as url:
        yield url


@pytest.fixture(scope="session")
def vllm_tiny_tool(
    vllm_python: Path, tiny_tool: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """vLLM (float32) on the tiny tool model with its Hermes tool parser, started once per
    session for the structured tests; its ``model`` name is the folder's path. Modules using
    it are marked ``xdist_group("vllm")``, as for :func:`vllm_qwen2`."""
    workdir = tmp_path_factory.mktemp("vllm-tool")

    def command(port: int) -> list[str]:
        flags = f"{VLLM_FLAGS} {VLLM_TOOL_FLAGS}"
        return vllm_cpu_command(vllm_python, flags).format(model=tiny_tool, port=port).split()

    with _running_with_env("vllm", command, workdir, VLLM_ENV, VLLM_HEALTH_TIMEOUT_S) as url:
        yield url


@pytest.fixture(scope="session")
def tiny_gguf(tiny_models: dict[str, Path]) -> Path:
    """The tiny adder as an f32 GGUF (from the same bf16 weights)."""
    out: Path = load_example("make_gguf").make_gguf(
        tiny_models["bf16"], MODELS_CACHE / "gguf" / "tiny-adder-f32.gguf"
    )
    return out


@pytest.fixture(scope="session")
def tiny_draft_gguf(tiny_draft: Path) -> Path:
    """The adder's draft model (``tiny-draft``: its first layer, same tokenizer) as an f32
    GGUF, for llama-server's ``-md``."""
    out: Path = load_example("make_gguf").make_gguf(
        tiny_draft, MODELS_CACHE / "gguf" / "tiny-draft-f32.gguf"
    )
    return out


@pytest.fixture(scope="session")
def tiny_lora_gguf(tiny_lora: Any, tiny_models: dict[str, Path], vllm_python: Path) -> Path:
    """The tiny adder's LoRA (``tiny_lora``) as an f32 GGUF LoRA for llama-server's
    ``--lora``, converted by llama.cpp's own ``convert_lora_to_gguf.py`` (vendored in the
    llama-cpp-python sdist) run with vLLM's CPU venv, which has the torch and transformers
    the converter needs."""
    out: Path = load_example("make_lora").lora_gguf(tiny_lora, tiny_models["bf16"], vllm_python)
    return out


@pytest.fixture(scope="session")
def tiny_lora2_gguf(tiny_lora2: Any, tiny_models: dict[str, Path], vllm_python: Path) -> Path:
    """The second LoRA (``tiny_lora2``, seed 1) as an f32 GGUF LoRA, converted like
    ``tiny_lora_gguf``."""
    make = load_example("make_lora")
    out: Path = make.lora_gguf(tiny_lora2, tiny_models["bf16"], vllm_python)
    return out


@pytest.fixture(scope="session")
def adder(tiny_models: dict[str, Path], tiny_gguf: Path) -> str:
    """The tiny adder for every kind of backend (a ``models:`` value): mlx weights and the
    f32 GGUF."""
    return f"{{path: '{tiny_models['bf16']}', gguf: '{tiny_gguf}'}}"


@pytest.fixture(scope="module")
def llama_url(
    llama_server_bin: Path, tiny_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A llama-server on the tiny GGUF with one slot and the adder's chat template, started
    directly (a faulty proxy can stand in front of it), one per test module."""
    flags = llama_flags(slots=1, context=64)
    workdir = tmp_path_factory.mktemp("llama")
    with llama_server(llama_server_bin, tiny_gguf, workdir, flags, chat_template=True) as url:
        yield url


REALISTIC_CONTEXT = 4096
"""Context of the llama-servers on the realistic models (the longest tokenizer-edge prompt
with its template and 24 generated tokens is far below it)."""


@contextlib.contextmanager
def _realistic_llama(binary: Path, model: Any, workdir: Path) -> Iterator[str]:
    """llama-server on a realistic model's GGUF with the model's own chat template
    (``--jinja``) and the exact f32 flags, one slot."""
    flags = llama_flags(slots=1, context=REALISTIC_CONTEXT).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(binary), "-m", str(model.gguf), *host, *flags, "--jinja"]

    with running("llama-server", command, workdir) as url:
        yield url


@pytest.fixture(scope="module")
def realistic_qwen_llama(
    llama_server_bin: Path, realistic_qwen: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Qwen3 (one per test module)."""
    with _realistic_llama(llama_server_bin, realistic_qwen, tmp_path_factory.mktemp("rq")) as url:
        yield url


@pytest.fixture(scope="module")
def realistic_llama3_llama(
    llama_server_bin: Path, realistic_llama3: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Llama 3 (one per test module)."""
    with _realistic_llama(llama_server_bin, realistic_llama3, tmp_path_factory.mktemp("rl")) as url:
        yield url


@pytest.fixture(scope="module")
def realistic_qwen_vllm(
    vllm_mlx_bin: Path, realistic_qwen: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """vllm-mlx serving the realistic Qwen3 folder (simple engine, concurrent requests wait
    for the lock); its ``model`` name is the folder's path."""
    workdir = tmp_path_factory.mktemp("rv")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(vllm_mlx_bin), "serve", str(realistic_qwen.path), *host]

    env = {"HF_HUB_CACHE": str(hub), "VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait"}
    with _running_with_env("vllm-mlx", command, workdir, env) as url:
        yield url


@pytest.fixture(scope="module")
def realistic_qwen_mlx_server(
    realistic_qwen: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """mlx_lm.server serving the realistic Qwen3 folder (requests omit ``model``)."""
    workdir = tmp_path_factory.mktemp("rm")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [
            sys.executable,
            "-m",
            "mlx_lm",
            "server",
            "--model",
            str(realistic_qwen.path),
            *host,
        ]

    with _running_with_env("mlx_lm.server", command, workdir, {"HF_HUB_CACHE": str(hub)}) as url:
        yield url


@contextlib.contextmanager
def _running_with_env(
    name: str, command: Any, workdir: Path, env: dict[str, str], timeout_s: float | None = None
) -> Iterator[str]:
    """:func:`running` with ``env`` set for the server only (it inherits it at start)."""
    with contextlib.ExitStack() as stack:
        with pytest.MonkeyPatch.context() as patch:
            for key, value in env.items():
                patch.setenv(key, value)
            timeout = {} if timeout_s is None else {"timeout_s": timeout_s}
            url = stack.enter_context(running(name, command, workdir, **timeout))
        yield url
