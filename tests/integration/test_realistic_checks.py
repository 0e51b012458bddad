"""The plugin's checks on the realistic Qwen3 (qwen35 vocabulary: 151,936 ids, Qwen3's chat
template) across real engines the plugin starts itself, run as a user runs them: a matrix, the
bundled ``tokenizer-edge`` suite (66 prompts), pytest, the results file. ``max_tokens: 12``
(the suite asks 24): what this test is about happens in the prompt, and the 12 tokens more
took 71 of its 122 CPU-s (93 s against 40 s alone).

- ``diff`` mlx-lm (float32, in-process, the chat template) vs llama-server (f32 GGUF, ``-fa off
  -ctk f32 -ctv f32``, ``--jinja``, chat mode): llama-server receives mlx-lm's prompt ids (the
  vocabularies agree on them, even on te052, where llama.cpp's own tokenizer promotes ``</s>``
  to a control token) and generates identical tokens on every prompt. At V = 151,936
  llama-server scores no full rows over HTTP (``n_probs`` = V is ~10 MB of JSON per
  position), so the KL is the top-k lower bound: its top-8 against mlx-lm's full rows.
- ``tokenization`` mlx-lm vs llama-server (``/tokenize``) vs vllm-mlx (``usage.prompt_tokens``,
  count only), thinking on: identical ids on 65 prompts; te052 differs as ``control-tokens``
  (allowed, and said); vllm-mlx's counts equal mlx-lm's.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.served import backend, llama_flags, llama_serve, vllm_serve
from tests.plugin.conftest import INI

SUITE_SIZE = 66
CONTROL_PROMPT = "te052"
"""The prompt that spells ``</s>``: an ordinary token of Qwen's vocabulary (128247) that
llama.cpp promotes to CONTROL at load, so its ``/tokenize`` parses the text as that token."""


def test_realistic_qwen_through_diff_and_tokenization(
    pytester: pytest.Pytester,
    realistic_qwen: Any,
    llama_server_bin: Path,
    vllm_mlx_bin: Path,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    hub = pytester.path / "hub"
    hub.mkdir()
    flags = f"{llama_flags(1, 4096)} --jinja"
    backends = backend("llama", "llama-server", llama_serve(llama_server_bin, flags), chat=True)
    backends += backend(
        "vllm",
        "vllm-mlx",
        vllm_serve(vllm_mlx_bin),
        {"VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION": "wait", "HF_HUB_CACHE": str(hub)},
        chat=True,
    )
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  qwen: {{path: '{realistic_qwen.path}', gguf: '{realistic_qwen.gguf}'}}
backends:
  local: {{kind: mlx-lm, dtype: float32}}
{backends}suites: [tokenizer-edge]
settings: {{thinking: true, max_tokens: 12}}
checks:
  - diff: {{model: qwen, backends: [local, llama]}}
    flips: {{fail_item_on: any}}
    min_similarity: 1.0
  - tokenization: {{targets: [qwen@local, qwen@llama, qwen@vllm], allow: [control-tokens]}}
""",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    # diff: 66 prompts + its aggregate; tokenization: 66 prompts x 2 other targets + aggregate.
    assert result.parseoutcomes() == {"passed": 3 * SUITE_SIZE + 2}, result.stdout.str()[-4000:]
    prompts = [i for i in items if i["role"] == "prompt"]
    assert_diff_shared_ids_and_identical([i for i in prompts if i["kind"] == "diff"])
    assert_tokenization([i for i in prompts if i["kind"] == "tokenization"])


def assert_diff_shared_ids_and_identical(items: list[dict[str, Any]]) -> None:
    """llama-server got mlx-lm's ids and generated the same tokens; scored teacher-forced on
    mlx-lm's continuation by its top 8 (its vocabulary is too large for full rows over HTTP),
    against mlx-lm's full rows, it bounds the KL at every position (float32: below 1e-3)."""
    assert len(items) == SUITE_SIZE
    for item in items:
        name, data = item["nodeid"], item["data"]
        assert data["sameness"] == "identical", (name, data["sameness"], data["origin_detail"])
        assert data["divergence_origin"] is None, name
        assert data["prompt_inputs"]["sharing"] == "shared ids", (name, data["prompt_inputs"])
        assert data["method"] == "teacher-forced-top-k", name
        kl = data["kl_per_position"]
        assert len(kl) == len(data["base_ids"]), name  # every position, not a prefix
        assert all(0.0 <= v < 1e-3 for v in kl), (name, kl)
        assert all(data["same_top"]), name
        assert not data["problems"], (name, data["problems"])


def assert_tokenization(items: list[dict[str, Any]]) -> None:
    """llama-server's ids equal mlx-lm's but on te052 (a control token, allowed and said);
    vllm-mlx's prompt token counts equal mlx-lm's (count only)."""
    llama = [i for i in items if i["nodeid"].endswith("[llama]")]
    vllm = [i for i in items if i["nodeid"].endswith("[vllm]")]
    assert len(llama) == len(vllm) == SUITE_SIZE
    for item in llama:
        name, data = item["nodeid"], item["data"]
        if f"::{CONTROL_PROMPT}[" in name:
            assert (data["status"], data["cause"], data["allowed"]) == (
                "differs",
                "control-tokens",
                True,
            ), data
        else:
            assert data["status"] == "identical", (name, data["explanation"])
    for item in vllm:
        name, data = item["nodeid"], item["data"]
        assert data["status"] == "count-only", (name, data["explanation"])
        assert data["other"]["count"] == data["reference"]["count"] > 0, name
