"""The Gemma 3 text (``gemma3_text``) variant of ``make_realistic.py``: sliding-window attention.

``make_realistic.py OUT --vocab llama-bpe --arch gemma3 --context 128 --sliding-window 160``
makes a tiny random Gemma 3 with any of the realistic vocabularies (the architecture and the
tokenizer are independent in Hugging Face and in GGUF). It is the one sliding-window
architecture mlx-lm (``gemma3_text``), llama.cpp (``gemma3``) and vLLM (``Gemma3ForCausalLM``)
all implement natively. What it carries, as Gemma 3 does:

- :data:`LAYERS` = 6 layers with Gemma 3's ``sliding_window_pattern`` 6: layers 0-4 local
  (sliding window, RoPE base :data:`LOCAL_ROPE_BASE` 10,000), layer 5 global (full
  attention, RoPE base :data:`GLOBAL_ROPE_BASE` 1,000,000). ``config.json`` says it twice:
  ``sliding_window_pattern`` (mlx-lm reads it) and ``layer_types`` (Transformers and vLLM).
  llama.cpp's converter writes no pattern for Gemma 3 (``conversion/gemma.py``
  ``Gemma3Model``: only ``sliding_window``); llama.cpp's loader then assumes 6
  (``models/gemma3.cpp``: ``load_swa_pattern(ml, 6)``), so a pattern of 6 is the one whose
  GGUF means the same to llama.cpp as its config means to the others.
- RMSNorm as ``x / rms(x) * (1 + w)`` everywhere (input, post-attention, pre- and
  post-feed-forward, q and k norms, final norm), with random ``w`` ~ N(0, :data:`NORM_STD`)
  so that an engine that drops the ``1 +`` is seen; the GGUF stores ``w + 1``, as the
  converter does (``norm_shift``).
- ``query_pre_attn_scalar`` = the head size (32): scores are scaled by ``32 ** -0.5``.
  llama.cpp does not read it (``f_attention_scale`` is ``1 / sqrt(head size)`` for every
  Gemma 3 but the 27B), so a different value would be a model llama.cpp cannot serve.
- the embedding scaled by ``sqrt(hidden)`` = 8 (exact in bfloat16, where mlx-lm rounds it),
  tied embeddings (no ``lm_head``), ``gelu_pytorch_tanh``.

The weights are drawn as ``realistic_weights.random_weights`` draws them (parameter ``k`` of the
sorted names from ``default_rng([seed, k])``), except: norms N(0, :data:`NORM_STD`), the tied
embedding N(0, :data:`EMBED_STD`), the final norm's gain ``1 + w`` around :data:`FINAL_GAIN`.
The residual stream starts at ``8 x 0.1 = 0.8`` per dimension, below what each layer adds,
so the context matters (with 0.25 the current token's own embedding dominated it); the final
gain gives the logits a std of about 3, so that the top-k KL sees a changed distribution.
Greedy continuations of a random tied model still fall into repeating one or two tokens
after a few (``degenerate`` in the aggregate). Two models of the same seed and vocabulary
have the same weights whatever their window: ``--sliding-window`` larger than any prompt is
the same model with no window in effect (the control of an engine that ignores it).
"""

from __future__ import annotations

from typing import Any

import gguf
import numpy as np

ARCH = "gemma3_text"
"""``model_type`` (mlx-lm ``models/gemma3_text.py``, Transformers ``Gemma3TextConfig``)."""
GGUF_ARCH = "gemma3"
MAKER_VERSION = 3
"""Bumped when what this module writes changes (part of the model folder's stamp)."""
HIDDEN = 64
LAYERS = 6
PATTERN = 6
"""Gemma 3's ``sliding_window_pattern``: every 6th layer global, the others local."""
HEADS = 2
KV_HEADS = 1
HEAD_DIM = 32
INTERMEDIATE = 128
LOCAL_ROPE_BASE = 10_000.0
GLOBAL_ROPE_BASE = 1_000_000.0
RMS_EPS = 1e-6
NORM_STD = 0.1
EMBED_STD = 0.1
FINAL_GAIN = 4.0
"""The final norm's mean gain ``1 + w`` (``w`` ~ N(3, 0.1)): the tied head's logits get a
std of about 3 (0.8 with a gain of 1: a near-uniform distribution over 128,256 tokens, whose
top-k KL is 0 even where the argmax differs)."""


def layer_types(layers: int = LAYERS, pattern: int = PATTERN) -> list[str]:
    """Transformers' ``layer_types`` of a ``sliding_window_pattern``: layer ``i`` is
    ``sliding_attention`` unless ``(i + 1) % pattern == 0``."""
    return [
        "full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)
    ]


def model_config(
    vocab_size: int,
    bos_id: int | None,
    eos_id: int | list[int],
    context: int,
    window: int,
    pad_id: int | None = None,
) -> dict[str, Any]:
    """``config.json`` of the tiny Gemma 3 text model (``Gemma3ForCausalLM``): context
    ``context`` (``max_position_embeddings``), sliding window ``window`` tokens."""
    if window < 1:
        raise ValueError(f"the sliding window must be at least 1 token, got {window}")
    config: dict[str, Any] = {
        "architectures": ["Gemma3ForCausalLM"],
        "model_type": ARCH,
        "hidden_size": HIDDEN,
        "num_hidden_layers": LAYERS,
        "intermediate_size": INTERMEDIATE,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "hidden_activation": "gelu_pytorch_tanh",
        "rms_norm_eps": RMS_EPS,
        "vocab_size": vocab_size,
        "max_position_embeddings": context,
        "rope_theta": GLOBAL_ROPE_BASE,
        "rope_local_base_freq": LOCAL_ROPE_BASE,
        "rope_scaling": None,
        "query_pre_attn_scalar": HEAD_DIM,
        "sliding_window": window,
        "sliding_window_pattern": PATTERN,
        "layer_types": layer_types(),
        "attn_logit_softcapping": None,
        "final_logit_softcapping": None,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": True,
        "eos_token_id": eos_id,
        "torch_dtype": "float32",
    }
    if bos_id is not None:
        config["bos_token_id"] = bos_id
    if pad_id is not None:
        config["pad_token_id"] = pad_id
    return config


def random_weights(config: dict[str, Any], seed: int) -> dict[str, np.ndarray]:
    """Float32 weights for mlx-lm's ``gemma3_text`` model of ``config`` (no ``lm_head``:
    tied), seeded per parameter name: norms N(0, 0.1) (gain ``1 + w``; the final norm
    N(3, 0.1)), the embedding N(0, 0.1), other matrices N(0, 1/fan_in)."""
    from mlx.utils import tree_flatten
    from mlx_lm.utils import _get_classes

    model_class, args_class = _get_classes(config)
    model = model_class(args_class.from_dict(config))
    shapes = {
        name: tuple(p.shape)
        for name, p in tree_flatten(model.parameters())
        if name != "lm_head.weight"
    }
    out: dict[str, np.ndarray] = {}
    for k, name in enumerate(sorted(shapes)):
        rng = np.random.default_rng([seed, k])
        shape = shapes[name]
        if name.endswith("norm.weight"):
            w = rng.standard_normal(shape, np.float32) * np.float32(NORM_STD)
            if name == "model.norm.weight":
                w += np.float32(FINAL_GAIN - 1)
        elif "embed_tokens" in name:
            w = rng.standard_normal(shape, np.float32) * np.float32(EMBED_STD)
        else:
            w = rng.standard_normal(shape, np.float32) * np.float32(shape[-1] ** -0.5)
        out[name] = np.ascontiguousarray(w, dtype=np.float32)
    return out


def add_hparams(writer: Any, config: dict[str, Any]) -> None:
    """The ``gemma3.*`` keys llama.cpp's ``convert_hf_to_gguf.py`` writes for ``config``
    (``conversion/base.py`` ``TextModel.set_gguf_parameters`` and ``conversion/gemma.py``
    ``Gemma3Model.set_gguf_parameters``): block count, context length, sizes, heads, the
    global RoPE base as ``rope.freq_base`` and the local one as ``rope.freq_base_swa``, the
    RMS epsilon, key/value lengths and ``attention.sliding_window``; no pattern key."""
    writer.add_block_count(int(config["num_hidden_layers"]))
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(int(config["hidden_size"]))
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(int(config["num_attention_heads"]))
    writer.add_head_count_kv(int(config["num_key_value_heads"]))
    writer.add_rope_freq_base(float(config["rope_theta"]))
    writer.add_rope_freq_base_swa(float(config["rope_local_base_freq"]))
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_key_length(int(config["head_dim"]))
    writer.add_value_length(int(config["head_dim"]))
    if config.get("sliding_window_pattern") != 1:
        writer.add_sliding_window(int(config["sliding_window"]))


def gguf_tensors(tensors: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """``(llama.cpp name, float32 array)`` of each tensor as the converter writes it: names
    from gguf-py's Gemma 3 tensor map, every ``*norm.weight`` shifted by +1 (``norm_shift``),
    no q/k permutation (NeoX RoPE); embeddings first, then layers in order, the final norm
    last."""
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.GEMMA3, LAYERS)

    def order(name: str) -> tuple[int, str]:
        parts = name.split(".")
        if name.startswith("model.layers."):
            return (1 + int(parts[2]), name)
        return (0 if "embed_tokens" in name else 1_000_000, name)

    out = []
    for hf_name in sorted(tensors, key=order):
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight",))
        if gguf_name is None:
            raise ValueError(f"no Gemma 3 GGUF name for {hf_name!r}")
        arr = tensors[hf_name]
        if hf_name.endswith("norm.weight"):
            arr = arr + np.float32(1.0)
        out.append((gguf_name, np.ascontiguousarray(arr, dtype=np.float32)))
    return out
