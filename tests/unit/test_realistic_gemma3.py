"""The Gemma 3 text variant of examples/models/make_realistic.py (realistic_gemma3.py):
``config.json`` as Transformers' ``Gemma3TextConfig`` reads it, the GGUF keys and tensors as
llama.cpp's ``convert_hf_to_gguf.py`` writes them for Gemma 3 (norms + 1, the local RoPE base
as ``rope.freq_base_swa``, ``attention.sliding_window``, no pattern key), values by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from conftest import load_example

gemma3 = load_example("realistic_gemma3")
realistic = load_example("make_realistic")


def test_layer_types_of_the_pattern() -> None:
    # Gemma 3's pattern 6: layers 0-4 local, 5 global (Transformers: (i + 1) % 6 == 0).
    assert gemma3.layer_types() == ["sliding_attention"] * 5 + ["full_attention"]
    assert gemma3.layer_types(4, 2) == ["sliding_attention", "full_attention"] * 2


def test_config() -> None:
    config = gemma3.model_config(128256, 128000, [128001, 128009], 1024, 128)
    assert config["model_type"] == "gemma3_text"
    assert config["architectures"] == ["Gemma3ForCausalLM"]
    assert config["max_position_embeddings"] == 1024
    assert config["sliding_window"] == 128
    assert config["sliding_window_pattern"] == 6
    assert config["layer_types"].count("full_attention") == 1
    assert (config["rope_theta"], config["rope_local_base_freq"]) == (1e6, 1e4)
    assert config["query_pre_attn_scalar"] == config["head_dim"] == 32
    assert config["hidden_activation"] == "gelu_pytorch_tanh"
    assert config["tie_word_embeddings"] is True
    with pytest.raises(ValueError, match="at least 1 token"):
        gemma3.model_config(10, None, 1, 64, 0)


def test_make_realistic_refuses_bad_combinations(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="arch must be one of"):
        realistic.make_realistic(tmp_path / "m", "llama-bpe", arch="olmo3")
    with pytest.raises(ValueError, match="gemma3 needs it"):
        realistic.make_realistic(tmp_path / "m", "llama-bpe", arch="gemma3")
    with pytest.raises(ValueError, match="goes with --arch gemma3"):
        realistic.make_realistic(tmp_path / "m", "llama-bpe", sliding_window=64)
    long = realistic.LongContext(128, "yarn", 8.0)
    with pytest.raises(ValueError, match="no RoPE scaling"):
        realistic.make_realistic(
            tmp_path / "m", "llama-bpe", long=long, arch="gemma3", sliding_window=64
        )


def _read(path: Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    reader = gguf.GGUFReader(path)
    fields = {k: f.contents() for k, f in reader.fields.items() if k.startswith("gemma3.")}
    return fields, {t.name: np.asarray(t.data) for t in reader.tensors}


def test_gguf_keys_and_tensors(tmp_path: Path) -> None:
    config = gemma3.model_config(16, None, 1, 1024, 128)
    tensors = {
        "model.embed_tokens.weight": np.full((16, 64), 0.5, np.float32),
        "model.norm.weight": np.full(64, -0.25, np.float32),
        "model.layers.5.post_feedforward_layernorm.weight": np.full(64, 0.1, np.float32),
        "model.layers.0.self_attn.k_norm.weight": np.zeros(32, np.float32),
        "model.layers.0.self_attn.q_proj.weight": np.full((64, 64), 2.0, np.float32),
    }
    writer = gguf.GGUFWriter(tmp_path / "m.gguf", arch="gemma3")
    gemma3.add_hparams(writer, config)
    for name, arr in gemma3.gguf_tensors(tensors):
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    fields, got = _read(tmp_path / "m.gguf")
    assert fields == {
        "gemma3.block_count": 6,
        "gemma3.context_length": 1024,
        "gemma3.embedding_length": 64,
        "gemma3.feed_forward_length": 128,
        "gemma3.attention.head_count": 2,
        "gemma3.attention.head_count_kv": 1,
        "gemma3.rope.freq_base": 1e6,
        "gemma3.rope.freq_base_swa": 1e4,
        "gemma3.attention.layer_norm_rms_epsilon": pytest.approx(1e-6),
        "gemma3.attention.key_length": 32,
        "gemma3.attention.value_length": 32,
        "gemma3.attention.sliding_window": 128,
    }
    # Names of llama.cpp's Gemma 3 tensors; every norm stored as 1 + w, the rest as is.
    assert sorted(got) == [
        "blk.0.attn_k_norm.weight",
        "blk.0.attn_q.weight",
        "blk.5.post_ffw_norm.weight",
        "output_norm.weight",
        "token_embd.weight",
    ]
    assert got["output_norm.weight"].tolist() == [0.75] * 64
    assert got["blk.5.post_ffw_norm.weight"] == pytest.approx(np.full(64, 1.1, np.float32))
    assert got["blk.0.attn_k_norm.weight"].tolist() == [1.0] * 32
    assert float(got["blk.0.attn_q.weight"].max()) == float(got["blk.0.attn_q.weight"].min()) == 2
    assert float(got["token_embd.weight"].max()) == 0.5


def test_random_weights_are_tied_and_seeded() -> None:
    config = gemma3.model_config(300, None, 1, 1024, 128)
    weights = gemma3.random_weights(config, 0)
    assert "lm_head.weight" not in weights
    assert weights["model.embed_tokens.weight"].shape == (300, 64)
    norms = [n for n in weights if n.endswith("norm.weight")]
    # 4 per layer + q/k norms, and the final norm: 6 x 6 + 1.
    assert len(norms) == 37
    # Gains 1 + w around 1 (w ~ N(0, 0.1)), the final norm's around 4 (w ~ N(3, 0.1)).
    assert all(0 < float(np.abs(weights[n]).max()) < 1 for n in norms if n != "model.norm.weight")
    assert (
        2.5
        < float(weights["model.norm.weight"].min())
        < 3
        < float(weights["model.norm.weight"].max())
        < 3.5
    )
    again = gemma3.random_weights({**config, "sliding_window": 4096}, 0)
    assert all(np.array_equal(weights[n], again[n]) for n in weights)
