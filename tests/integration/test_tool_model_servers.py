"""The tiny tool-calling model (``tiny-tool``: Qwen 2.5 template, Hermes calls) on real
engines:

- every prompt of the bundled ``tool-use`` suite (requests with the four tools, two calls,
  the zero-argument tool, answers after tool results, requests without tools) renders to the
  same prompt ids on mlx-lm (``apply_chat_template(messages, tools=[...])``), llama-server
  (``/apply-template`` with ``tools``, ``--jinja``) and vLLM (``/tokenize`` with ``messages``
  and ``tools``);
- greedy generations on the raw paths (mlx-lm in process, llama-server ``/completion``, vLLM
  ``/v1/completions``, each given its own rendering) keep the model's calls in the text,
  ``<tool_call>{...}</tool_call>``, and are the same text on all three (float32).

vLLM here is the session's tool-model server (``vllm_tiny_tool``: the hermes tool parser, as
the issue runs it), shared with the other structured tests."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import GenerationParams
from pytest_infercheck.backends.base import Backend, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.vllm import VllmBackend
from pytest_infercheck.conversation import concrete, prompt_turns
from pytest_infercheck.suites import Prompt, load_suite
from tests.integration.served import llama_flags, running

pytestmark = pytest.mark.xdist_group("vllm")

SUITE = load_suite("tool-use", Path(__file__).parent)


@pytest.fixture(scope="module")
def tool_llama(
    llama_server_bin: Path, tiny_tool_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the tool model's f32 GGUF with its template (``--jinja``), exact f32
    flags, one slot."""
    flags = llama_flags(slots=1, context=2048).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(tiny_tool_gguf), *host, *flags, "--jinja"]

    with running("llama-server", command, tmp_path_factory.mktemp("toolmodel-llama")) as url:
        yield url


def _render(backend: Backend, prompt: Prompt) -> Any:
    """``prompt`` as ``backend`` renders it (a conversation's every turn; a prompt with
    tools as its turns with the tools), as the generation cache asks."""
    if prompt.messages is None and not prompt.tools:
        return backend.render(prompt.text, prompt.system, False)
    turns = concrete(prompt.messages or prompt_turns(prompt), {})
    return backend.render_messages(turns, False, tools=prompt.tools)


def _engines(
    tiny_tool: Path, llama_url: str, vllm_url: str
) -> tuple[MlxLmBackend, LlamaServerBackend, VllmBackend]:
    mlx = MlxLmBackend("mlx", MlxModelSpec(str(tiny_tool), dtype="float32"))
    llama = LlamaServerBackend("llama", HttpSettings(base_url=llama_url), chat=True)
    vllm = VllmBackend("vllm", HttpSettings(base_url=vllm_url), model=str(tiny_tool))
    return mlx, llama, vllm


def test_the_tool_use_suite_renders_to_the_same_ids_on_every_engine(
    tiny_tool: Path, tool_llama: str, vllm_tiny_tool: str
) -> None:
    mlx, llama, vllm = _engines(tiny_tool, tool_llama, vllm_tiny_tool)

    async def render() -> dict[str, list[PromptInput]]:
        try:
            await llama.ensure_ready()
            await vllm.ensure_ready()
            return {p.id: [await _render(b, p) for b in (mlx, llama, vllm)] for p in SUITE.prompts}
        finally:
            await llama.aclose()
            await vllm.aclose()

    renders = asyncio.run(render())
    assert len(renders) == len(SUITE.prompts) >= 40
    for prompt in SUITE.prompts:
        ours, by_llama, by_vllm = renders[prompt.id]
        assert ours.token_ids, prompt.id
        assert ("<tools>" in ours.text) == bool(prompt.tools), prompt.id
        assert by_llama.token_ids == ours.token_ids, (prompt.id, by_llama.text, ours.text)
        assert by_vllm.token_ids == ours.token_ids, (prompt.id, by_vllm.text, ours.text)
    results = [p for p in SUITE.prompts if p.messages is not None]
    assert results and all("<tool_response>" in renders[p.id][0].text for p in results)


def test_raw_generations_keep_the_calls_in_the_text_alike_on_every_engine(
    tiny_tool: Path, tool_llama: str, vllm_tiny_tool: str
) -> None:
    """Each engine generates greedily from its own rendering of every prompt that expects
    calls: the text holds ``<tool_call>`` blocks, and it is the same text on all three."""
    mlx, llama, vllm = _engines(tiny_tool, tool_llama, vllm_tiny_tool)
    calling = [p for p in SUITE.prompts if p.answer_kind == "tool_call"]
    params = GenerationParams(max_tokens=64)

    async def generate() -> dict[str, list[str]]:
        try:
            await llama.ensure_ready()
            await vllm.ensure_ready()
            out: dict[str, list[str]] = {}
            for prompt in calling:
                texts = []
                for backend in (mlx, llama, vllm):
                    generation = await backend.generate(await _render(backend, prompt), params)
                    assert generation.tool_calls == (), (backend.name, prompt.id)  # raw paths
                    texts.append(generation.text)
                out[prompt.id] = texts
            return out
        finally:
            await llama.aclose()
            await vllm.aclose()

    texts = asyncio.run(generate())
    for prompt_id, (ours, by_llama, by_vllm) in texts.items():
        assert "<tool_call>" in ours and "</tool_call>" in ours, (prompt_id, ours)
        assert by_llama == ours, (prompt_id, by_llama, ours)
        assert by_vllm == ours, (prompt_id, by_vllm, ours)
