"""The ``llama``/``qwen2``/``qwen3`` model of ``make_realistic.py``: its sizes, its
``config.json`` and its seeded random float32 weights, written as ``model.safetensors``.

``make_realistic.py`` re-exports these names; the Gemma 3 variant's own are in
``realistic_gemma3.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from infercheck_siblings import load_sibling as _load_sibling  # loaded by make_realistic.py

if TYPE_CHECKING:  # for mypy; at run time the siblings are loaded by path (_load_sibling)
    from realistic_long_context import LongContext


_vocab = _load_sibling("realistic_vocab")
_long = _load_sibling("realistic_long_context")

HIDDEN = 64
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = HIDDEN // HEADS
"""32: the smallest head size vLLM's CPU attention supports (16 passes ``/health`` and kills
the engine on the first request), so that every engine serves the same models."""
INTERMEDIATE = 128
HEAD_STD = 0.5
"""Std of the untied output head: logits spread enough that greedy choices are decisive."""


def model_config(
    vocab: str,
    vocab_size: int,
    bos_id: int | None,
    eos_id: int | list[int],
    long: LongContext | None = None,
) -> dict[str, Any]:
    """``config.json`` of the tiny model: hidden 64, 2 layers, 2 heads of 32 (1 KV), float32;
    ``eos_id`` one id or the list of end ids (:func:`eos_ids`); ``long`` the context length
    and RoPE scaling (:class:`LongContext`; default: 4096 tokens, no scaling)."""
    spec = _vocab.VOCABS[vocab]
    long = long or _long.LongContext()
    arch_name = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM"}
    config: dict[str, Any] = {
        "architectures": [arch_name.get(spec.arch, "LlamaForCausalLM")],
        "model_type": spec.arch,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab_size,
        "max_position_embeddings": long.max_positions,
        "rope_theta": spec.rope_theta,
        "tie_word_embeddings": False,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
    }
    if bos_id is not None:
        config["bos_token_id"] = bos_id
    if (scaling := long.rope_scaling()) is not None:
        config["rope_scaling"] = scaling
    if spec.arch == "llama":
        config.update(attention_bias=False, mlp_bias=False)
    return config


def random_weights(config: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Float32 weights for the mlx-lm model of ``config``, seeded per parameter name.

    Parameter ``k`` (in sorted-name order) draws from ``numpy.random.default_rng([seed,
    k])``: norms are ones, the embedding N(0, 1), the output head N(0, 0.5), biases N(0,
    0.1), other matrices N(0, 1/fan_in).
    """
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    shapes = {name: tuple(p.shape) for name, p in tree_flatten(model.parameters())}
    out: dict[str, np.ndarray] = {}
    for k, name in enumerate(sorted(shapes)):
        rng = np.random.default_rng([seed, k])
        shape = shapes[name]
        if name.endswith("norm.weight"):
            w = np.ones(shape, np.float32)
        elif "embed_tokens" in name:
            w = rng.standard_normal(shape, np.float32)
        elif name == "lm_head.weight":
            w = rng.standard_normal(shape, np.float32) * HEAD_STD
        elif name.endswith(".bias"):
            w = rng.standard_normal(shape, np.float32) * 0.1
        else:
            w = rng.standard_normal(shape, np.float32) * np.float32(shape[-1] ** -0.5)
        out[name] = np.ascontiguousarray(w, dtype=np.float32)
    return out


def _save_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    """A float32 ``.safetensors`` file (the format is a JSON header plus raw bytes)."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name in sorted(tensors):
        size = tensors[name].nbytes
        header[name] = {
            "dtype": "F32",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with path.open("wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name in sorted(tensors):
            f.write(tensors[name].tobytes())
