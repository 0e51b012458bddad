"""The f32 GGUF of ``make_realistic.py``'s models, for llama-server: llama.cpp's metadata keys,
tensor names and ``tokenizer.*`` keys for the architecture, the vocabulary and the template.

GGUF tensors: as llama.cpp's converter names them; the ``llama`` architecture gets the q/k
row permutation of ``make_gguf.py`` (rotate-half -> interleaved RoPE); ``qwen2``/``qwen3``
use NeoX RoPE and are not permuted; the Gemma 3 keys and tensors are
``realistic_gemma3.py``'s. ``make_realistic.py`` re-exports these names.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gguf
import numpy as np
from infercheck_siblings import load_sibling as _load_sibling  # loaded by make_realistic.py

if TYPE_CHECKING:  # for mypy; at run time the siblings are loaded by path (_load_sibling)
    from realistic_vocab import Vocab, VocabSpec


_make_gguf = _load_sibling("make_gguf")
_gemma3 = _load_sibling("realistic_gemma3")
_vocab = _load_sibling("realistic_vocab")
_long = _load_sibling("realistic_long_context")
_weights = _load_sibling("realistic_weights")

_EXTRA_LAYER_TENSORS = {
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "self_attn.q_norm.weight": "attn_q_norm.weight",
    "self_attn.k_norm.weight": "attn_k_norm.weight",
}


def _gguf_name(hf_name: str) -> str:
    """llama.cpp's tensor name, including the qwen2 biases and qwen3 q/k norms."""
    for hf_suffix, suffix in _EXTRA_LAYER_TENSORS.items():
        if hf_name.startswith("model.layers.") and hf_name.endswith(hf_suffix):
            layer = hf_name.split(".")[2]
            return f"blk.{layer}.{suffix}"
    name = _make_gguf.gguf_tensor_name(hf_name)
    assert isinstance(name, str)
    return name


def write_gguf(
    out: Path,
    vocab: str,
    config: dict[str, Any],
    tensors: dict[str, np.ndarray],
    template: str,
    bos_id: int | None,
    eos_id: int,
    pad_id: int | None,
) -> None:
    """The f32 GGUF of the model: llama.cpp's metadata keys and tensor names for the
    architecture, the vocabulary of :func:`_read_vocab`, the chat template, and the context
    length and RoPE scaling of ``config`` (:class:`LongContext`)."""
    spec = _vocab.VOCABS[vocab]
    v = _vocab._gguf_vocab(vocab)
    gemma3 = config["model_type"] == _gemma3.ARCH
    writer = _make_gguf._Writer(out, arch=_gemma3.GGUF_ARCH if gemma3 else spec.arch)
    writer.add_name(f"tiny-realistic-{vocab}")
    writer.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    if gemma3:
        _gemma3.add_hparams(writer, config)
    else:
        _add_hparams(writer, spec, config, len(v.tokens))
    _add_tokenizer(writer, vocab, v, template, bos_id, eos_id, pad_id)
    named = _gemma3.gguf_tensors(tensors) if gemma3 else _gguf_tensors(spec, config, tensors)
    for name, arr in named:
        writer.add_tensor(name, arr)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _add_hparams(writer: Any, spec: VocabSpec, config: dict[str, Any], n_vocab: int) -> None:
    """The hyperparameter keys of the ``llama``/``qwen2``/``qwen3`` GGUF: sizes, RoPE base,
    context length and RoPE scaling (:class:`LongContext`)."""
    writer.add_context_length(int(config["max_position_embeddings"]))
    scaling = config.get("rope_scaling")
    if scaling is not None:
        _add_rope_scaling(writer, scaling)
    writer.add_embedding_length(_weights.HIDDEN)
    writer.add_block_count(_weights.LAYERS)
    writer.add_feed_forward_length(_weights.INTERMEDIATE)
    writer.add_head_count(_weights.HEADS)
    writer.add_head_count_kv(_weights.KV_HEADS)
    writer.add_key_length(_weights.HEAD_DIM)
    writer.add_value_length(_weights.HEAD_DIM)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if spec.arch == "llama":
        writer.add_rope_dimension_count(_weights.HEAD_DIM)
        writer.add_vocab_size(n_vocab)


def _gguf_tensors(
    spec: VocabSpec, config: dict[str, Any], tensors: dict[str, np.ndarray]
) -> Iterator[tuple[str, np.ndarray]]:
    """The ``llama``/``qwen2``/``qwen3`` tensors under llama.cpp's names, in its order: q/k
    rows permuted for ``llama`` (rotate-half -> interleaved RoPE), then ``rope_freqs`` for
    ``llama3`` RoPE scaling."""
    for hf_name in sorted(tensors, key=_make_gguf._tensor_order):
        arr = tensors[hf_name]
        if spec.arch == "llama" and hf_name.endswith("self_attn.q_proj.weight"):
            arr = _make_gguf.permute_qk(arr, _weights.HEADS, _weights.HEADS)
        elif spec.arch == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            arr = _make_gguf.permute_qk(arr, _weights.HEADS, _weights.KV_HEADS)
        yield _gguf_name(hf_name), np.ascontiguousarray(arr, dtype=np.float32)
    scaling = config.get("rope_scaling")
    if scaling is not None and scaling["rope_type"] == "llama3":
        if spec.arch != "llama":
            raise ValueError("llama3 RoPE scaling is llama.cpp's rope_freqs of the llama arch")
        yield (
            "rope_freqs.weight",
            _long.llama3_rope_freqs(spec.rope_theta, _weights.HEAD_DIM, scaling),
        )


def _add_tokenizer(
    writer: Any,
    vocab: str,
    v: Vocab,
    template: str,
    bos_id: int | None,
    eos_id: int,
    pad_id: int | None,
) -> None:
    """The ``tokenizer.*`` keys of the GGUF: the vocabulary of :func:`_read_vocab` (BPE as
    ``gpt2``), BOS/EOS/PAD, whether BOS is added, and the chat template."""
    spec = _vocab.VOCABS[vocab]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(v.pre)
    writer.add_token_list(v.tokens)
    writer.add_token_types(v.types)
    writer.add_token_merges(v.merges)
    if bos_id is not None:
        writer.add_bos_token_id(bos_id)
    else:  # Qwen GGUFs name <|endoftext|> as BOS but never add it
        writer.add_bos_token_id(v.tokens.index("<|endoftext|>"))
    writer.add_eos_token_id(eos_id)
    if pad_id is not None:
        writer.add_pad_token_id(pad_id)
    writer.add_add_bos_token(spec.add_bos)
    writer.add_chat_template(template)


def _add_rope_scaling(writer: Any, scaling: dict[str, Any]) -> None:
    """The ``rope.scaling.*`` keys llama.cpp's converter writes for ``scaling``
    (``conversion/base.py``): linear: type and factor; yarn: also the original context
    length; llama3: none (its ``rope_freqs.weight`` tensor instead)."""
    rope_type = scaling["rope_type"]
    if rope_type == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
    elif rope_type == "yarn":
        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(float(scaling["factor"]))
        writer.add_rope_scaling_orig_ctx_len(int(scaling["original_max_position_embeddings"]))
    elif rope_type != "llama3":
        raise ValueError(f"no GGUF form for RoPE scaling {rope_type!r}")
