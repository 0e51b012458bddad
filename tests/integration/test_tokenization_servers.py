"""The tokenization check across real engines serving the tiny adder (byte-level tokenizer).

- mlx-lm in-process vs llama-server (``/tokenize``): identical ids, a multi-byte character
  included, but for a prompt that spells ``<s>`` itself: mlx-lm's render adds no BOS before
  it, llama-server does (a doubled BOS, position 1: a real difference); with ``add_bos:
  false`` on the mlx-lm side, every item fails as a BOS difference; with a copy of the
  model whose HF tokenizer normalizes NFC, a decomposed accent fails as ``normalization``
  (llama.cpp does not normalize).
- vllm-mlx and mlx_lm.server (no ``/tokenize``: probed, recorded; ``usage.prompt_tokens``):
  with the chat template on both sides, equal counts pass as ``count-only``; in raw
  completions the servers add no BOS where mlx-lm does, and the counts differ by one, the
  item naming mlx-lm's leading ``<s>`` (but on the prompt that spells ``<s>`` itself).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.served import chat_model, llama_at, mlx_lm_backend, vllm_backends
from tests.plugin.conftest import INI
from tests.plugin.test_tokenization import nfc_copy

PROMPTS = [("s01", "12+34="), ("s02", "99+99="), ("e01", "<s>1+1=</s>"), ("e02", "é 7+8=")]


def write(pytester: pytest.Pytester, models: str, backends: str, checks: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    lines = [json.dumps({"id": i, "prompt": p, "max_tokens": 2}) for i, p in PROMPTS]
    pytester.makefile(".jsonl", prompts="\n".join(lines))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n{models}backends:\n{backends}suites: [prompts.jsonl]\n"
        f"checks:\n{checks}",
    )


def run(pytester: pytest.Pytester) -> tuple[pytest.RunResult, dict[str, dict[str, Any]]]:
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    doc = json.loads((pytester.path / "r.json").read_text())
    return result, {item["name"]: item for item in doc["items"]}


def test_mlx_lm_and_llama_server_agree_and_a_missing_bos_fails(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    backends = "  local: {kind: mlx-lm}\n  nobos: {kind: mlx-lm, add_bos: false}\n"
    backends += llama_at(llama_url)
    checks = (
        "  - tokenization: {targets: [adder@local, adder@llama]}\n"
        "  - name: nobos\n    tokenization: {targets: [adder@nobos, adder@llama]}\n"
    )
    write(pytester, f"  adder: {adder}\n", backends, checks)
    result, _ = run(pytester)
    # Faithful on 3 prompts; e01, which spells "<s>", differs (see below); nobos: all 4.
    assert result.parseoutcomes() == {"passed": 3, "failed": 1 + 1 + 4 + 1}, result.stdout.str()
    doc = json.loads((pytester.path / "r.json").read_text())
    by_node = {i["nodeid"].split("::", 1)[1]: i["data"] for i in doc["items"]}
    for prompt_id in ("s01", "s02", "e02"):
        assert by_node[f"tokenization(adder)::prompts::{prompt_id}[llama]"]["status"] == "identical"
    assert by_node["tokenization(adder)::prompts::e02[llama]"]["reference"]["count"] == 8
    # A prompt that starts with the BOS's spelling: mlx-lm's render adds no second BOS,
    # llama-server adds one before the parsed "<s>": a doubled BOS, at position 1.
    doubled = by_node["tokenization(adder)::prompts::e01[llama]"]
    assert (doubled["cause"], doubled["first_difference"]) == ("bos", 1)
    assert doubled["reference"]["ids"] == [1, 52, 46, 52, 64, 2]
    assert doubled["other"]["ids"] == [1, 1, 52, 46, 52, 64, 2]
    assert "adder@llama with 2 special tokens (1 '<s>', 1 '<s>')" in doubled["explanation"]
    for prompt_id, _ in PROMPTS:
        data = by_node[f"tokenization(nobos)::prompts::{prompt_id}[llama]"]
        position = 1 if prompt_id == "e01" else 0  # e01 spells its own <s>
        assert (data["cause"], data["first_difference"]) == ("bos", position), prompt_id


def test_nfc_normalization_against_llama_server(
    pytester: pytest.Pytester, llama_url: str, tiny_models: dict[str, Path], tiny_gguf: Path
) -> None:
    nfc = nfc_copy(tiny_models["bf16"], pytester.path / "adder-nfc")
    models = f"  adder: {{path: '{nfc}', gguf: '{tiny_gguf}'}}\n"
    backends = "  local: {kind: mlx-lm}\n" + llama_at(llama_url)
    write(pytester, models, backends, "  - tokenization: {targets: [adder@local, adder@llama]}\n")
    pytester.makefile(".jsonl", prompts=json.dumps({"id": "n1", "prompt": "cafe\u0301"}))
    result, items = run(pytester)
    assert result.parseoutcomes() == {"failed": 2}, result.stdout.str()
    data = items["n1[llama]"]["data"]
    assert (data["cause"], data["first_difference"]) == ("normalization", 4)
    assert "adder@local normalizes it to NFC, adder@llama does not" in data["explanation"]


def test_servers_without_ids_are_compared_by_count(
    pytester: pytest.Pytester,
    tiny_models: dict[str, Path],
    vllm_mlx_bin: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    folder = chat_model(tiny_models["bf16"], tmp_path_factory.mktemp("chat") / "adder-chat")
    hub = pytester.path / "hub"
    hub.mkdir()
    raw = vllm_backends(vllm_mlx_bin, hub) + mlx_lm_backend(hub)
    chat = raw.replace("chat: false", "chat: true").replace("  vllm:", "  vllmchat:")
    chat = chat.replace("  vllmcb:", "  vllmcbchat:").replace("  mlxserver:", "  mlxchat:")
    backends = "  local: {kind: mlx-lm}\n  localraw: {kind: mlx-lm, chat: false}\n"
    checks = (
        "  - name: chat\n"
        "    tokenization: {targets: [adder@local, adder@vllmchat, adder@mlxchat]}\n"
        "  - name: raw\n"
        "    tokenization: {targets: [adder@localraw, adder@vllm, adder@mlxserver]}\n"
    )
    write(pytester, f"  adder: {{path: '{folder}'}}\n", backends + raw + chat, checks)
    run(pytester)
    doc = json.loads((pytester.path / "r.json").read_text())
    by_node = {i["nodeid"].split("::", 1)[1]: i for i in doc["items"]}
    for prompt_id, _ in PROMPTS:
        for server in ("vllmchat", "mlxchat"):
            data = by_node[f"tokenization(chat)::prompts::{prompt_id}[{server}]"]["data"]
            assert data["status"] == "count-only", (prompt_id, server, data["explanation"])
            assert data["other"]["source"] == "usage"
            assert data["other"]["count"] == data["reference"]["count"]
        for server in ("vllm", "mlxserver"):
            item = by_node[f"tokenization(raw)::prompts::{prompt_id}[{server}]"]
            if prompt_id == "e01":  # spells its "<s>": mlx-lm adds none, the servers parse it
                assert item["outcome"] == "passed" and item["data"]["status"] == "count-only"
                continue
            assert item["outcome"] == "failed" and item["data"]["cause"] == "count"
            assert item["data"]["explanation"].endswith(
                "the difference is adder@localraw's 1 special token (1 '<s>'): a BOS one side adds?"
            )
    engines = by_node["tokenization(chat)::prompts::aggregate"]["data"]["engines"]
    assert engines["adder@vllmchat"]["observed"]["tokenize"] is False
    assert engines["adder@mlxchat"]["observed"]["tokenize"] is False
    chat_agg = by_node["tokenization(chat)::prompts::aggregate"]
    assert chat_agg["outcome"] == "passed" and chat_agg["data"]["count_only"] == 8
