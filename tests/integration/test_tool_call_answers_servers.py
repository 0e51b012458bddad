"""Tool-call answers from a real chat server that parses the calls out of the text.

mlx_lm.server serves the tiny tool model and returns its calls apart from the text
(``message.tool_calls``); mlx-lm in-process leaves the same calls in its text as
``<tool_call>`` blocks. A compare of the two on the bundled ``tool-use`` suite's tool
requests must find every answer unchanged (the same engine, the same weights, the same
template), so the server-parsed calls reach the answers and equal the calls read from text,
and no output of calls only is taken for an empty generation.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.conftest import _running_with_env

INI = "[pytest]\nasyncio_default_fixture_loop_scope = function\n"


@pytest.fixture(scope="module")
def tool_mlx_server(tiny_tool: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """mlx_lm.server serving the tiny tool model (requests omit ``model``)."""
    workdir = tmp_path_factory.mktemp("tool-mlx-server")
    hub = workdir / "hub"
    hub.mkdir()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [sys.executable, "-m", "mlx_lm", "server", "--model", str(tiny_tool), *host]

    with _running_with_env("mlx_lm.server", command, workdir, {"HF_HUB_CACHE": str(hub)}) as url:
        yield url


def test_server_parsed_calls_equal_the_calls_in_text(
    pytester: pytest.Pytester, tiny_tool: Path, tool_mlx_server: str
) -> None:
    bundled = Path(__file__).parents[2] / "suites" / "tool-use.jsonl"
    lines = [json.loads(line) for line in bundled.read_text().splitlines()]
    chosen = [d for d in lines if d.get("answer_kind") == "tool_call"]
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", tools="\n".join(json.dumps(d) for d in chosen))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{tiny_tool}'}}\n"
        "backends:\n  local: {kind: mlx-lm}\n"
        f"  srv: {{kind: openai, url: '{tool_mlx_server}', logprobs: false}}\n"
        "suites: [tools.jsonl]\nchecks:\n"
        "  - compare: {baseline: tool@local, test: tool@srv}\n"
        "    flips: {max_rate: 0.2}\n",
    )
    out = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(f"--infercheck-results={out}", "-p", "no:cacheprovider")
    assert out.exists(), result.stdout.str()[-3000:]
    items = [i for i in json.loads(out.read_text())["items"] if i["role"] == "prompt"]
    assert len(items) == len(chosen)
    apart = 0
    for item in items:
        data = item["data"]
        assert data["flip"] == "unchanged", (item["name"], data["base_text"], data)
        assert item["violations"] == [], (item["name"], item["violations"])
        assert "<tool_call>" in data["base_text"]  # in-process: the calls are in the text
        if data.get("test_tool_calls"):
            apart += 1
            assert data["test_tool_calls"] == data["test_answer"]  # every call, parsed apart
    # mlx_lm.server parses every call of this model out of its text.
    assert apart == len(chosen), apart
    assert result.ret == 0, result.stdout.str()[-3000:]
