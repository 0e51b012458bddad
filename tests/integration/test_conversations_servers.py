"""Conversations on real servers, on the realistic Qwen2 (the Qwen2.5 chat template):

- ``render_messages`` of a 3-turn conversation with a system prompt gives the same prompt ids
  on llama-server (``/apply-template``, ``--jinja``), vLLM (``/tokenize`` with messages: the
  session's shared float32 server) and mlx-lm (``apply_chat_template``);
- a diff of mlx-lm against llama-server and vLLM on conversations with ``generate`` turns
  (part of the bundled ``multi-turn`` suite) passes faithfully, every turn compared on shared
  ids;
- a fault: a faulty proxy in front of the llama-server that perturbs every request after the
  first of a conversation's turns (its later requests), so the first generated turn is the
  same and the next one differs: the item fails with ``first_divergent_turn`` the second
  generated turn; without the proxy it passes (break, then fix).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends.base import Message
from pytest_infercheck.backends.http import HttpSettings
from pytest_infercheck.backends.llama_server import LlamaServerBackend
from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
from pytest_infercheck.backends.vllm import VllmBackend
from pytest_infercheck.suites import bundled_suites_dir
from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.conftest import REALISTIC_CONTEXT
from tests.integration.served import llama_flags, running
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

CONVERSATION = (
    Message("system", "You are a terse assistant."),
    Message("user", "What is 2+2?"),
    Message("assistant", "4"),
    Message("user", "And 3+3?"),
)


@pytest.fixture(scope="module")
def qwen2_llama(
    llama_server_bin: Path, realistic_qwen2: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """llama-server on the realistic Qwen2's f32 GGUF, its own template (``--jinja``), exact
    f32 flags, one slot."""
    flags = llama_flags(slots=1, context=REALISTIC_CONTEXT).split()

    def command(port: int) -> list[str]:
        host = ["--host", "127.0.0.1", "--port", str(port)]
        return [str(llama_server_bin), "-m", str(realistic_qwen2.gguf), *host, *flags, "--jinja"]

    with running("llama-server", command, tmp_path_factory.mktemp("q2llama")) as url:
        yield url


def test_render_messages_gives_mlx_lms_ids_on_every_server(
    realistic_qwen2: Any, qwen2_llama: str, vllm_qwen2: str
) -> None:
    mlx = MlxLmBackend("mlx", MlxModelSpec(str(realistic_qwen2.path), dtype="float32"))
    expected = asyncio.run(mlx.render_messages(CONVERSATION, False))
    assert expected.token_ids is not None
    assert expected.text.count("<|im_start|>") == 5  # system, user, assistant, user, + prompt
    assert expected.text.endswith("<|im_start|>user\nAnd 3+3?<|im_end|>\n<|im_start|>assistant\n")

    async def servers() -> list[tuple[int, ...] | None]:
        llama = LlamaServerBackend("llama", HttpSettings(base_url=qwen2_llama), chat=True)
        vllm = VllmBackend(
            "vllm", HttpSettings(base_url=vllm_qwen2), model=str(realistic_qwen2.path)
        )
        try:
            out = []
            for backend in (llama, vllm):
                await backend.ensure_ready()
                out.append((await backend.render_messages(CONVERSATION, False)).token_ids)
            return out
        finally:
            await llama.aclose()
            await vllm.aclose()

    llama_ids, vllm_ids = asyncio.run(servers())
    assert llama_ids == expected.token_ids
    assert vllm_ids == expected.token_ids


def _matrix(realistic_qwen2: Any, llama_url: str, vllm_url: str) -> str:
    return f"""\
models:
  qwen: {{path: '{realistic_qwen2.path}', gguf: '{realistic_qwen2.gguf}'}}
backends:
  local32: {{kind: mlx-lm, dtype: float32}}
  llama: {{kind: llama-server, url: '{llama_url}'}}
  vllm: {{kind: vllm, url: '{vllm_url}'}}
suites: [conv.jsonl]
checks:
  - diff: {{model: qwen, backends: [local32, llama, vllm]}}
"""


def _conversations(pytester: pytest.Pytester, ids: set[str]) -> None:
    """``ids`` of the bundled multi-turn suite, each answered in 8 tokens."""
    path = bundled_suites_dir() / "multi-turn.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    lines = [json.dumps({**r, "max_tokens": 8}) for r in records if r["id"] in ids]
    assert len(lines) == len(ids)
    pytester.makefile(".jsonl", conv="\n".join(lines))


def _run(pytester: pytest.Pytester, matrix: str) -> dict[str, dict[str, Any]]:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".yaml", infercheck=matrix)
    out = pytester.path / "r.json"
    result = pytester.runpytest_subprocess(f"--infercheck-results={out}", "-p", "no:cacheprovider")
    assert out.exists(), result.stdout.str()[-3000:]
    items = json.loads(out.read_text())["items"]
    out.unlink()
    return {i["name"]: i for i in items if i["role"] == "prompt"}


GENERATED = {"mt009", "mt015", "mt025"}
"""One generated turn (mt009), two (mt015), a long table (mt025: 535 tokens)."""


def test_a_diff_on_conversations_passes_faithfully(
    pytester: pytest.Pytester, realistic_qwen2: Any, qwen2_llama: str, vllm_qwen2: str
) -> None:
    _conversations(pytester, GENERATED)
    items = _run(pytester, _matrix(realistic_qwen2, qwen2_llama, vllm_qwen2))
    assert set(items) == {f"{i}[{b}]" for i in GENERATED for b in ("llama", "vllm")}
    for name, item in items.items():
        data = item["data"]
        assert item["violations"] == [], (name, item["violations"])
        assert data["first_divergent_turn"] is None, name
        generated = [t for t in data["turns"] if t["kind"] == "generated"]
        assert generated and all(t["same"] for t in generated), name
        assert data["prompt_inputs"]["sharing"] == "shared ids", name
    two = items["mt015[llama]"]["data"]["turns"]
    assert [t["index"] for t in two if t["kind"] != "given"] == [2, 4, 6]


def test_a_faulty_server_is_caught_at_the_first_generated_turn(
    pytester: pytest.Pytester, realistic_qwen2: Any, qwen2_llama: str, vllm_qwen2: str
) -> None:
    """Break: every generation through the proxy has its last token changed, so the
    conversation's generated turn 2 (after the system and user turns) already differs from
    mlx-lm's, and the diff fails there; the faithful server passes (the test above)."""
    _conversations(pytester, {"mt009"})
    with FaultyProxy(qwen2_llama, Fault(perturb_every=1)) as proxy:
        items = _run(pytester, _matrix(realistic_qwen2, proxy.url, vllm_qwen2))
        assert proxy.altered > 0
    faulty, faithful = items["mt009[llama]"], items["mt009[vllm]"]
    assert faithful["violations"] == []
    assert faulty["data"]["first_divergent_turn"] == 2
    turn = faulty["data"]["turns"][2]
    assert (turn["kind"], turn["same"]) == ("generated", False)
    assert any(v.startswith("turn 2 not identical:") for v in faulty["violations"])
