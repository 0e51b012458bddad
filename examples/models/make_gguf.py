"""Convert the tiny Hugging Face-format llama models of this repo to GGUF for llama.cpp.

Pure Python + numpy + the ``gguf`` package (``pip install gguf``): no torch, no mlx, no
network. Written for ``tiny-adder`` and the other tiny models made by ``make_models.py``
(``LlamaForCausalLM``, bf16/f16/f32 safetensors, byte-level BPE tokenizer whose
``tokenizer.json`` has no merges), following llama.cpp's own ``convert_hf_to_gguf.py``
(``LlamaModel``): same metadata keys, same tensor names, and the same q/k row permutation
(HF llama keeps q/k in the rotate-half RoPE layout; llama.cpp's ``llama`` architecture
expects the interleaved one).

CLI::

    python examples/models/make_gguf.py SRC_DIR OUT.gguf [--dtype f32|f16]

Importable (``examples`` is not a package; load it by path with ``importlib``)::

    make_gguf(src, out, dtype="f32") -> Path

Weights: ``f32`` (default) writes every tensor as float32, so a bf16 model is represented
exactly and llama.cpp computes in float32 like an mlx float32 forward pass; ``f16`` writes
2-D weights as float16 and the norms as float32 (llama.cpp's ``MOSTLY_F16``).

Tokenizer: ``tokenizer.ggml.model = "gpt2"`` with pre-tokenizer ``"gpt-2"`` (the GPT-2
regex, i.e. a ByteLevel pre-tokenizer with ``use_regex=True``), the vocabulary's byte-level
symbols as tokens, CONTROL type for special added tokens and USER_DEFINED for the other added
tokens (llama.cpp then matches them in any text, as the HF tokenizer does, and keeps them in
decoded text: ``<tool_call>`` of tiny-tool), the merges of ``tokenizer.json`` (an empty array
for tiny-adder: llama.cpp requires the key to exist), BOS/EOS/UNK/PAD ids, ``add_bos_token``
(``tokenizer_config.json``'s ``add_bos_token``; true when it does not say, as for tiny-adder)
and the ``chat_template`` of ``tokenizer_config.json`` (``tokenizer.chat_template``) when
it has one.

Re-running is cheap: an output whose stamp (``OUT.gguf.stamp.json``) records the same
source hash and settings is left alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import struct
import tempfile
from collections.abc import Sequence
from importlib.metadata import version as _dist_version
from pathlib import Path
from typing import Any

import gguf
import numpy as np

MAKER_VERSION = 2
DTYPES = ("f32", "f16")
STAMP_SUFFIX = ".stamp.json"
SOURCE_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
"""Files whose contents decide the GGUF (hashed into the stamp)."""

_LAYER_TENSORS = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
_GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_RE = re.compile(r"^model\.layers\.(\d+)\.(.+)$")


# --------------------------------------------------------------------------- safetensors


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """All tensors of a ``.safetensors`` file as float32 numpy arrays (BF16, F16 or F32).

    bfloat16 is widened exactly (its bits are the top half of a float32), so no torch or
    mlx is needed.
    """
    data = Path(path).read_bytes()
    (header_len,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_len])
    base = 8 + header_len
    out: dict[str, np.ndarray] = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[base + start : base + end]
        shape = tuple(info["shape"])
        dtype = info["dtype"]
        if dtype == "BF16":
            bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = bits.view(np.float32)
        elif dtype == "F16":
            arr = np.frombuffer(raw, dtype="<f2").astype(np.float32)
        elif dtype == "F32":
            arr = np.frombuffer(raw, dtype="<f4").astype(np.float32)
        else:
            raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {dtype}")
        out[name] = arr.reshape(shape)
    return out


# --------------------------------------------------------------------------- conversion


def permute_qk(weights: np.ndarray, n_head: int, n_head_kv: int | None = None) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``: rotate-half (HF) rows -> interleaved RoPE rows.

    For each head, rows ``[x_0..x_{d/2-1}, y_0..y_{d/2-1}]`` become ``[x_0, y_0, x_1, y_1,
    ...]``. ``n_head_kv`` (when it differs from ``n_head``) is the head count of ``k``.
    """
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def gguf_tensor_name(hf_name: str) -> str | None:
    """llama.cpp's name for an HF llama tensor (None: not stored, e.g. rotary inv_freq)."""
    if hf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[hf_name]
    m = _LAYER_RE.match(hf_name)
    if m is not None:
        if m.group(2).endswith("rotary_emb.inv_freq"):
            return None
        if m.group(2) in _LAYER_TENSORS:
            return f"blk.{m.group(1)}.{_LAYER_TENSORS[m.group(2)]}"
    raise ValueError(f"no GGUF name for tensor {hf_name!r} (only plain llama tensors are known)")


def _tokenizer_vocab(
    tokenizer: dict[str, Any], vocab_size: int
) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges for ``tokenizer.ggml.*`` from a ``tokenizer.json``."""
    model = tokenizer.get("model", {})
    if model.get("type") != "BPE":
        raise ValueError(f"only BPE tokenizers are supported, got {model.get('type')!r}")
    pre = tokenizer.get("pre_tokenizer") or {}
    if not (
        pre.get("type") == "ByteLevel"
        and pre.get("use_regex", True)
        and not pre.get("add_prefix_space", False)
    ):
        raise ValueError(
            "only a ByteLevel pre-tokenizer with use_regex=True and add_prefix_space=False "
            f"maps to llama.cpp's 'gpt-2' pre-tokenizer; got {pre!r}"
        )
    by_id: dict[int, str] = {int(i): tok for tok, i in model["vocab"].items()}
    special: set[int] = set()
    added_ids: set[int] = set()
    for added in tokenizer.get("added_tokens", []):
        if int(added["id"]) not in by_id:
            added_ids.add(int(added["id"]))
        by_id[int(added["id"])] = added["content"]
        if added.get("special", False):
            special.add(int(added["id"]))
    if by_id and max(by_id) >= vocab_size:
        raise ValueError(
            f"tokenizer has id {max(by_id)} but the model's vocab_size is {vocab_size}"
        )
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i not in by_id:
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
        else:
            tokens.append(by_id[i])
            types.append(int(_token_type(i, special, added_ids)))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return tokens, types, merges


def _token_type(i: int, special: set[int], added: set[int]) -> gguf.TokenType:
    """CONTROL for a special added token, USER_DEFINED for another added token (one that is
    also a vocabulary entry of the BPE model stays NORMAL), NORMAL otherwise."""
    if i in special:
        return gguf.TokenType.CONTROL
    if i in added:
        return gguf.TokenType.USER_DEFINED
    return gguf.TokenType.NORMAL


class _Writer(gguf.GGUFWriter):
    """``GGUFWriter`` that can store an empty typed array.

    gguf-py refuses empty arrays (``add_array`` silently drops them, ``_pack_val`` raises),
    but llama.cpp's BPE loader fails with "cannot find tokenizer merges in model file" when
    ``tokenizer.ggml.merges`` is absent, and a tokenizer without merges (tiny-adder) needs
    exactly an empty string array there.
    """

    def _pack_val(
        self,
        val: Any,
        vtype: gguf.GGUFValueType,
        add_vtype: bool,
        sub_type: gguf.GGUFValueType | None = None,
    ) -> bytes:
        if vtype == gguf.GGUFValueType.ARRAY and sub_type is not None and len(val) == 0:
            head = self._pack("I", vtype) if add_vtype else b""
            return bytes(head + self._pack("I", sub_type) + self._pack("Q", 0))
        return bytes(super()._pack_val(val, vtype, add_vtype, sub_type))


def _write_gguf(src: Path, out: Path, dtype: str) -> None:
    config = json.loads((src / "config.json").read_text())
    if config.get("model_type") != "llama":
        raise ValueError(f"{src}: model_type {config.get('model_type')!r} is not 'llama'")
    tokenizer = json.loads((src / "tokenizer.json").read_text())
    tok_config_path = src / "tokenizer_config.json"
    tok_config = json.loads(tok_config_path.read_text()) if tok_config_path.is_file() else {}

    n_embd = int(config["hidden_size"])
    n_layer = int(config["num_hidden_layers"])
    n_head = int(config["num_attention_heads"])
    n_head_kv = int(config.get("num_key_value_heads") or n_head)
    head_dim = int(config.get("head_dim") or n_embd // n_head)
    vocab_size = int(config["vocab_size"])
    rope = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if rope.get("rope_type", "default") != "default":
        raise ValueError(f"{src}: only default RoPE is supported, got {rope!r}")
    rope_theta = float(rope.get("rope_theta", config.get("rope_theta", 10000.0)))

    tokens, types, merges = _tokenizer_vocab(tokenizer, vocab_size)
    token_ids = {t: i for i, t in enumerate(tokens)}

    def special_id(key: str) -> int | None:
        if config.get(f"{key}_token_id") is not None:
            return int(config[f"{key}_token_id"])
        tok = tok_config.get(f"{key}_token")
        tok = tok.get("content") if isinstance(tok, dict) else tok
        return token_ids.get(tok) if tok is not None else None

    tensors = read_safetensors(src / "model.safetensors")
    file_type = gguf.LlamaFileType.ALL_F32 if dtype == "f32" else gguf.LlamaFileType.MOSTLY_F16

    writer = _Writer(out, arch="llama")
    writer.add_name(src.resolve().name)
    writer.add_file_type(int(file_type))
    writer.add_context_length(int(config["max_position_embeddings"]))
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(int(config["intermediate_size"]))
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_rope_dimension_count(head_dim)
    writer.add_rope_freq_base(rope_theta)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    writer.add_vocab_size(vocab_size)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_key_value(
        gguf.Keys.Tokenizer.MERGES, merges, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.STRING
    )
    for key, add in (
        ("bos", writer.add_bos_token_id),
        ("eos", writer.add_eos_token_id),
        ("unk", writer.add_unk_token_id),
    ):
        tid = special_id(key)
        if tid is not None:
            add(tid)
    pad = special_id("pad")
    if pad is not None:
        writer.add_pad_token_id(pad)
    writer.add_add_bos_token(bool(tok_config.get("add_bos_token", True)))
    writer.add_add_eos_token(False)
    if isinstance(tok_config.get("chat_template"), str):
        writer.add_chat_template(tok_config["chat_template"])

    seen: set[str] = set()
    for hf_name in sorted(tensors, key=_tensor_order):
        name = gguf_tensor_name(hf_name)
        if name is None:
            continue
        arr = tensors[hf_name]
        if hf_name.endswith("self_attn.q_proj.weight"):
            arr = permute_qk(arr, n_head, n_head)
        elif hf_name.endswith("self_attn.k_proj.weight"):
            arr = permute_qk(arr, n_head, n_head_kv)
        if dtype == "f16" and arr.ndim >= 2:
            arr = arr.astype(np.float16)
        writer.add_tensor(name, np.ascontiguousarray(arr))
        seen.add(name)
    required = {"token_embd.weight", "output_norm.weight"} | {
        f"blk.{i}.{n}" for i in range(n_layer) for n in _LAYER_TENSORS.values()
    }
    if not config.get("tie_word_embeddings", False):
        required.add("output.weight")
    if missing := sorted(required - seen):
        raise ValueError(f"{src}: missing tensors {missing}")

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _tensor_order(hf_name: str) -> tuple[int, str]:
    """Embeddings first, then layers in numeric order, then the final norm and head."""
    m = _LAYER_RE.match(hf_name)
    if m is not None:
        return (1 + int(m.group(1)), m.group(2))
    return (0 if "embed_tokens" in hf_name else 1_000_000, hf_name)


# --------------------------------------------------------------------------- stamp + API


def source_hash(src: Path) -> str:
    """SHA-256 over the names and contents of the source files that decide the GGUF."""
    h = hashlib.sha256()
    for name in SOURCE_FILES:
        f = src / name
        if f.is_file():
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _stamp(src: Path, dtype: str) -> dict[str, Any]:
    return {
        "maker_version": MAKER_VERSION,
        "gguf_version": _dist_version("gguf"),
        "source": src.name,
        "source_hash": source_hash(src),
        "dtype": dtype,
    }


def _stamp_path(out: Path) -> Path:
    return out.with_name(out.name + STAMP_SUFFIX)


def make_gguf(src: Path, out: Path, dtype: str = "f32") -> Path:
    """Convert the HF-format llama model in ``src`` to the GGUF file ``out``.

    Args:
        src: Folder with ``config.json``, ``model.safetensors``, ``tokenizer.json``
            (and optionally ``tokenizer_config.json``), e.g. ``examples/models/tiny-adder``.
        out: The ``.gguf`` file to write (its folder is created).
        dtype: ``"f32"`` (every tensor float32: exact for bf16 weights) or ``"f16"``.

    Returns:
        ``out``. Written to a temporary file and renamed into place; reused as it is when
        its stamp (``out`` + ``.stamp.json``) records the same source hash and settings.
    """
    src, out = Path(src), Path(out)
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    if not (src / "config.json").is_file():
        raise FileNotFoundError(f"no model at {src}")
    stamp = _stamp(src, dtype)
    stamp_path = _stamp_path(out)
    try:
        if out.is_file() and json.loads(stamp_path.read_text()) == stamp:
            return out
    except (OSError, ValueError):
        pass
    out.parent.mkdir(parents=True, exist_ok=True)
    stamp_path.unlink(missing_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}-", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _write_gguf(src, tmp, dtype)
        tmp.chmod(0o644)  # mkstemp makes 0600
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    tmp_stamp = stamp_path.with_name(f".{stamp_path.name}.{os.getpid()}.tmp")
    tmp_stamp.write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    os.replace(tmp_stamp, stamp_path)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; prints the written file."""
    ap = argparse.ArgumentParser(description="Convert a tiny HF-format llama model to GGUF.")
    ap.add_argument("src", type=Path, help="model folder (config.json, model.safetensors, ...)")
    ap.add_argument("out", type=Path, help="the .gguf file to write")
    ap.add_argument("--dtype", choices=DTYPES, default="f32")
    args = ap.parse_args(argv)
    print(make_gguf(args.src, args.out, args.dtype))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
