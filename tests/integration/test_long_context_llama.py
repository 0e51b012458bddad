"""Long context on llama-server: the ``context-ladder`` suite (0.5x, 1x, 2x and 4x the
original context of 128 tokens) of the tiny Llama 3 with each RoPE scaling (linear, llama3,
yarn; factor 8), llama-server (f32 GGUF, exact flags, ``--jinja``, 1024 tokens of context)
against mlx-lm in-process in float32, teacher-forced (top-k: llama-server's logprobs). What
the engines do is in docs/how-to/long-context.md; this test holds them to it:

- llama3 and yarn: identical at every length, 4x included;
- linear: identical at 0.5x; from 1x on llama-server refuses the request (HTTP 400, the
  slot's context capped at the GGUF's unscaled ``context_length`` of 128 whatever ``-c``
  says): not a wrong answer, a refusal;
- control: the same weights without the scaling (an engine that ignores it) against the
  llama3-scaled model fails at every length;
- sliding window: the tiny Gemma 3 (window 128, context 1024; the ladder anchored at the
  window) identical at every length; control, a second test side of the same check: the
  same weights with the window off in the GGUF (an engine that ignores it) passes 0.5x and
  1x and fails 2x and 4x.

The GGUF of each variant is read back too: its rope scaling keys (linear, yarn) or its
``rope_freqs`` tensor (llama3) as llama.cpp's converter writes them; Gemma 3's window keys
and its norms stored as ``1 + w``.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import (
    LONG_CONTEXT,
    LONG_VARIANTS,
    SWA_WINDOW,
    load_example,
    realistic_long,
    realistic_swa,
)
from tests.integration.served import llama_flags, running

CONTEXT = 1024
"""llama-server's context: 4x the original (512 tokens) and 16 generated fit."""


@pytest.fixture(scope="module")
def long_models() -> dict[str, Any]:
    """The three scaled variants, and ``plain``: the same weights with no scaling and a
    context of 1024 (the GGUF of an engine that ignores the scaling)."""
    models = {rope: realistic_long(rope) for rope in LONG_VARIANTS}
    models["plain"] = realistic_long(None, CONTEXT)
    models["swa"] = realistic_swa()
    models["swa_off"] = realistic_swa(4096)
    return models


@pytest.fixture(scope="module")
def long_llama_urls(
    llama_server_bin: Path, long_models: dict[str, Any], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """A llama-server per variant, on its GGUF with its own chat template."""
    flags = [*llama_flags(slots=1, context=CONTEXT).split(), "--jinja"]
    with contextlib.ExitStack() as stack:
        urls = {}
        for rope, model in long_models.items():

            def command(port: int, gguf_path: Path = model.gguf) -> list[str]:
                host = ["--host", "127.0.0.1", "--port", str(port)]
                return [str(llama_server_bin), "-m", str(gguf_path), *host, *flags]

            workdir = tmp_path_factory.mktemp(f"long-{rope}")
            urls[rope] = stack.enter_context(running("llama-server", command, workdir))
        yield urls


def test_gguf_carries_each_scaling(long_models: dict[str, Any]) -> None:
    made = load_example("make_realistic")
    for rope in LONG_VARIANTS:
        model = long_models[rope]
        config = json.loads((model.path / "config.json").read_text())
        assert config["rope_scaling"]["rope_type"] == rope
        reader = gguf.GGUFReader(model.gguf)
        fields = {k: f.contents() for k, f in reader.fields.items() if ".rope." in k}
        tensors = {t.name: t.data.tolist() for t in reader.tensors if t.name.startswith("rope")}
        if rope == "llama3":
            assert "llama.rope.scaling.type" not in fields
            expected = made.llama3_rope_freqs(500000.0, 32, config["rope_scaling"]).tolist()
            assert tensors == {"rope_freqs.weight": expected}
        else:
            assert fields["llama.rope.scaling.type"] == rope
            assert fields["llama.rope.scaling.factor"] == 8.0
            assert not tensors
        if rope == "yarn":
            assert fields["llama.rope.scaling.original_context_length"] == LONG_CONTEXT


def test_gguf_carries_the_sliding_window(long_models: dict[str, Any]) -> None:
    model = long_models["swa"]
    config = json.loads((model.path / "config.json").read_text())
    assert config["sliding_window"] == SWA_WINDOW
    assert config["layer_types"] == ["sliding_attention"] * 5 + ["full_attention"]
    reader = gguf.GGUFReader(model.gguf)
    fields = {  # not the tokenizer's: contents() of 128,256 tokens takes seconds
        k: f.contents() for k, f in reader.fields.items() if k.startswith(("gemma3.", "general."))
    }
    assert fields["general.architecture"] == "gemma3"
    assert fields["gemma3.attention.sliding_window"] == SWA_WINDOW
    assert fields["gemma3.rope.freq_base_swa"] == 10000.0
    assert fields["gemma3.rope.freq_base"] == 1000000.0
    assert fields["gemma3.context_length"] == CONTEXT
    assert fields["gemma3.block_count"] == 6
    assert "gemma3.attention.sliding_window_pattern" not in fields  # llama.cpp assumes 6
    tensors = {t.name: np.asarray(t.data) for t in reader.tensors}
    assert "output.weight" not in tensors  # tied
    st = load_file(str(model.path / "model.safetensors"))
    for hf, name in [
        ("model.norm.weight", "output_norm.weight"),
        ("model.layers.5.self_attn.q_norm.weight", "blk.5.attn_q_norm.weight"),
        ("model.layers.0.pre_feedforward_layernorm.weight", "blk.0.ffn_norm.weight"),
    ]:
        np.testing.assert_array_equal(tensors[name], st[hf] + np.float32(1))
    np.testing.assert_array_equal(tensors["token_embd.weight"], st["model.embed_tokens.weight"])
    off = gguf.GGUFReader(long_models["swa_off"].gguf)
    assert off.fields["gemma3.attention.sliding_window"].contents() == 4096
    assert all(
        np.array_equal(np.asarray(t.data), tensors[t.name]) for t in off.tensors
    )  # the same weights


def test_context_ladder_on_llama_server(
    pytester: pytest.Pytester, long_models: dict[str, Any], long_llama_urls: dict[str, str]
) -> None:
    plain = long_models["plain"]
    models = "\n".join(
        f"  {rope}: {{path: '{m.path}', gguf: '{m.gguf}'}}"
        for rope, m in long_models.items()
        if rope not in ("plain", "swa_off")
    )
    backends = "\n".join(
        f"  llama_{rope}: {{kind: llama-server, url: '{url}'}}"
        for rope, url in long_llama_urls.items()
    )
    checks = "\n".join(
        f"  - diff: {{model: {rope}, backends: [f32, llama_{rope}]}}\n    name: {rope}"
        for rope in LONG_VARIANTS
    )
    llama3 = long_models["llama3"]
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
{models}
  unscaled: {{path: '{llama3.path}', gguf: '{plain.gguf}'}}
backends:
  f32: {{kind: mlx-lm, dtype: float32}}
{backends}
suites: [context-ladder]
checks:
{checks}
  - diff: {{model: unscaled, backends: [f32, llama_plain]}}
    name: ignored
  - diff: {{model: swa, backends: [f32, llama_swa, llama_swa_off]}}
    name: swa
""",
    )
    result = pytester.runpytest_subprocess(
        "--infercheck-results=out.json", "-p", "no:cacheprovider", "-rA"
    )
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    prompts: dict[str, dict[str, dict[str, Any]]] = {}
    levels: dict[str, dict[str, Any]] = {}
    for item in items:
        check = item["check"]
        if check == "diff(swa)":  # two test sides: diff(swa)@llama_swa, diff(swa)@llama_swa_off
            side = item["nodeid"].split("[")[-1].rstrip("]") if item["role"] == "prompt" else ""
            check = f"{check}@{side}"
        if item["role"] == "prompt":
            bucket = item["nodeid"].split("::")[-1].split("[")[0].split("-")[1]
            prompts.setdefault(check, {})[bucket] = item
        elif item["data"].get("levels"):
            for level in item["data"]["levels"]:
                side = "@" + level["test"].split("@")[1] if check.endswith("@") else ""
                levels[check.rstrip("@") + side] = level
    report = {
        check: [(b["bucket"], b["kl_mean"], b["top_flips"], b["n_failed"]) for b in lv["buckets"]]
        for check, lv in levels.items()
    }
    print(json.dumps(report, indent=1))
    # llama3 and yarn: identical to mlx-lm at every length, 4x included.
    for rope in ("llama3", "yarn"):
        by_bucket = prompts[f"diff({rope})"]
        assert sorted(by_bucket) == ["0.5x", "1x", "2x", "4x"]
        for item in by_bucket.values():
            assert item["outcome"] == "passed", item["violations"]
            assert item["data"]["sameness"] == "identical"
            assert item["data"]["method"] == "teacher-forced-top-k"
            assert item["data"]["kl_max"] < 1e-5
        assert [b[0] for b in report[f"diff({rope})"]] == ["0.5x", "1x", "2x", "4x"]
    # linear: llama-server caps a slot at the GGUF's context_length (HF's linear
    # max_position_embeddings, unscaled: 128) whatever -c says, and refuses the longer
    # prompts with a 400 (no silent truncation); 0.5x is identical.
    linear = prompts["diff(linear)"]
    assert linear["0.5x"]["outcome"] == "passed"
    for bucket in ("1x", "2x", "4x"):
        assert linear[bucket]["outcome"] == "failed"
        assert "exceeds the available context size (128 tokens)" in linear[bucket]["longrepr"]
    # The gate sees a RoPE scaling ignored: the unscaled GGUF (same weights) against the
    # llama3-scaled model in mlx-lm differs.
    # Measured: every bucket fails (token 0 differs), mean KL 0.059, 0.070, 0.063, 0.178.
    ignored = prompts["diff(ignored)"]
    assert sorted(ignored) == ["0.5x", "1x", "2x", "4x"]
    assert all(item["outcome"] == "failed" for item in ignored.values())
    by_bucket = {b[0]: b for b in report["diff(ignored)"]}
    assert all(b[3] == 1 and b[2] > 0 for b in by_bucket.values())
    assert by_bucket["4x"][1] > 0.1
    summary = result.stdout.str()
    assert "diff(ignored) context-ladder: unscaled@llama_plain: KL by length: 0.5x" in summary
    # Sliding window (Gemma 3, window 128: the ladder is 64, 128, 256 and 512 tokens):
    # llama-server applies it as mlx-lm does, inside the window and far past it.
    swa = prompts["diff(swa)@llama_swa"]
    assert sorted(swa) == ["0.5x", "1x", "2x", "4x"]
    for item in swa.values():
        assert item["outcome"] == "passed", item["violations"]
        assert item["data"]["sameness"] == "identical"
        assert item["data"]["kl_max"] < 1e-5
    # The gate sees a window ignored: llama_swa_off serves the same weights with the window
    # off in the GGUF (4096). It passes inside the window (0.5x: 80 tokens with the generated
    # ones) and at it (1x: the same tokens; measured mean KL 0.0058 over the 16 generated
    # positions past 128), and fails past it (measured: 2x mean KL 0.163, 4x 0.217; token 0
    # differs).
    swa_ignored = prompts["diff(swa)@llama_swa_off"]
    assert {b: i["outcome"] for b, i in swa_ignored.items()} == {
        "0.5x": "passed",
        "1x": "passed",
        "2x": "failed",
        "4x": "failed",
    }
    by_bucket = {b[0]: b for b in report["diff(swa)@llama_swa_off"]}
    assert by_bucket["0.5x"][1] < 1e-6
    assert by_bucket["2x"][1] > 0.05 and by_bucket["4x"][1] > 0.05
    assert [by_bucket[b][3] for b in ("0.5x", "1x", "2x", "4x")] == [0, 0, 1, 1]
