"""Make the tiny test models: bf16 baseline + mlx_lm quantizations, and a random-weight model.

Uses only mlx / mlx_lm (no torch, no network). The bf16 baseline is the committed
``tiny-adder`` model (trained by ``train_tiny_adder.py``); the quantized variants are made
with mlx_lm's own converter (``mlx_lm.convert.convert``, affine quantization of every
``Linear`` and ``Embedding`` whose input width is divisible by the group size).

CLI::

    python examples/models/make_models.py OUT_DIR [--bits 8 4] [--group-size 32] [--random-seed 0]

which writes ``OUT_DIR/tiny-bf16``, ``OUT_DIR/tiny-q8``, ``OUT_DIR/tiny-q4``,
``OUT_DIR/tiny-draft`` (the adder's first layer alone: a draft model for speculative
decoding, same tokenizer), ``OUT_DIR/tiny-tool`` (a copy of the committed tool-calling model
``tiny-tool/``, with its f32 GGUF inside, ``gguf/tiny-tool-f32.gguf``) and, with
``--random-seed``, ``OUT_DIR/tiny-random-s<seed>``.
Re-running is cheap: a folder whose stamp file records the same source hash and settings is
left alone.

Importable (``examples`` is not a package; load it by path with ``importlib``)::

    make_variants(out_dir, bits=(8, 4), group_size=32)
        -> {"bf16": Path, "q8": Path, "q4": Path, "draft": Path}
    make_draft(out_dir, layers=1) -> Path
    make_tool_model(out_dir) -> Path          # out_dir / "tiny-tool"; tool_gguf(folder)
    make_random_model(out_dir, seed=0) -> Path

plus small helpers for the adder prompt format (``prompt_ids``, ``greedy_generate``,
``adder_answers``, ``adder_accuracy``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx_lm
import mlx_lm.utils
from mlx.utils import tree_flatten, tree_unflatten
from mlx_lm.convert import convert as mlx_lm_convert
from mlx_lm.generate import generate_step
from mlx_lm.models import llama

HERE = Path(__file__).resolve().parent
SOURCE_DIR = HERE / "tiny-adder"
"""The committed, trained bf16 model."""

TOOL_SOURCE_DIR = HERE / "tiny-tool"
"""The committed, trained tool-calling model (Qwen 2.5 template, Hermes-format calls)."""
TOOL_GGUF = Path("gguf") / "tiny-tool-f32.gguf"
"""Where :func:`make_tool_model` puts the GGUF, relative to the model folder."""

STAMP_NAME = ".infercheck-stamp.json"
MAKER_VERSION = 1

BOS_ID = 1
EOS_ID = 2
BYTE_OFFSET = 3
"""Token id of byte ``b`` is ``b + BYTE_OFFSET`` (ids 0..2 are ``<unk>``, ``<s>``, ``</s>``)."""

MAX_NEW_TOKENS = 4
"""Up to 3 answer digits + EOS."""

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")

RANDOM_MODEL_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "hidden_act": "silu",
    "rms_norm_eps": 1e-5,
    "vocab_size": 259,
    "max_position_embeddings": 64,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "bos_token_id": BOS_ID,
    "eos_token_id": EOS_ID,
    "torch_dtype": "bfloat16",
}
"""Config of the random-weight model (same tokenizer as tiny-adder, hidden 64)."""


# --------------------------------------------------------------------------- stamps


HASH_SKIP = frozenset({STAMP_NAME, "README.md"})


def dir_hash(path: Path) -> str:
    """SHA-256 over relative names and contents of the files in ``path``.

    The stamp and ``README.md`` are skipped, so refreshing the model card does not force
    the variants to be rebuilt.
    """
    h = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name not in HASH_SKIP):
        h.update(f.relative_to(path).as_posix().encode())
        h.update(b"\0")
        h.update(hashlib.sha256(f.read_bytes()).digest())
    return h.hexdigest()


def _stamp(**settings: Any) -> dict[str, Any]:
    return {
        "maker_version": MAKER_VERSION,
        "mlx_version": str(getattr(mx, "__version__", "unknown")),
        "mlx_lm_version": mlx_lm.__version__,
        **settings,
    }


def _stamp_matches(target: Path, stamp: dict[str, Any]) -> bool:
    try:
        return bool(json.loads((target / STAMP_NAME).read_text()) == stamp)
    except (OSError, ValueError):
        return False


def _build_atomically(target: Path, stamp: dict[str, Any], build: Callable[[Path], None]) -> Path:
    """Run ``build(tmp_path)`` (``tmp_path`` does not exist yet) and move the result to
    ``target`` with the stamp, unless ``target`` already carries the same stamp."""
    if _stamp_matches(target, stamp):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{target.name}-", dir=target.parent) as tmp:
        work = Path(tmp) / target.name
        build(work)
        (work / STAMP_NAME).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
        if target.exists():
            shutil.rmtree(target)
        try:
            os.replace(work, target)
        except OSError:
            # Another process finished the same folder first; accept it if it matches.
            if not _stamp_matches(target, stamp):
                raise
    return target


# --------------------------------------------------------------------------- variants


def _quantize_with_mlx_lm(src: Path, dst: Path, bits: int, group_size: int) -> None:
    """Quantize ``src`` into the (not yet existing) folder ``dst`` with ``mlx_lm.convert``."""
    log = io.StringIO()
    with contextlib.redirect_stdout(log):
        # NB: ``mlx_lm.convert`` is the function (re-exported by mlx_lm/__init__), not the
        # module, hence the ``from mlx_lm.convert import convert`` above.
        mlx_lm_convert(
            hf_path=str(src),
            mlx_path=str(dst),
            quantize=True,
            q_bits=bits,
            q_group_size=group_size,
        )
    card = (
        f"# tiny-q{bits}\n\n"
        f"`{src.name}` quantized by `make_models.py` with mlx_lm {mlx_lm.__version__} "
        f"(`mlx_lm.convert`, affine, {bits} bits, group size {group_size}).\n\n"
        "```\n" + log.getvalue().strip() + "\n```\n"
    )
    (dst / "README.md").write_text(card)


def make_variants(
    out_dir: Path,
    bits: Sequence[int] = (8, 4),
    group_size: int = 32,
    source: Path = SOURCE_DIR,
) -> dict[str, Path]:
    """Make the bf16 baseline and its mlx_lm quantizations under ``out_dir``.

    Args:
        out_dir: Parent folder; receives ``tiny-bf16`` and ``tiny-q<bits>`` for each bits.
        bits: Quantization bit widths (mlx affine: 2, 3, 4, 5, 6 or 8).
        group_size: Quantization group size (32, 64 or 128; must divide the hidden size).
        source: The bf16 Hugging Face-format model to start from (default: ``tiny-adder``).

    Returns:
        ``{"bf16": out_dir / "tiny-bf16", "q8": ..., "q4": ..., "draft": ...}``, one
        ``q<bits>`` key per requested bit width and the draft model (:func:`make_draft`).
        Each folder loads with ``mlx_lm.load``.

    Folders whose stamp records the same source hash and settings are reused as they are.
    """
    out_dir = Path(out_dir)
    source = Path(source)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"no model at {source}")
    src_hash = dir_hash(source)
    result: dict[str, Path] = {}

    def copy(work: Path) -> None:
        shutil.copytree(source, work)

    result["bf16"] = _build_atomically(
        out_dir / "tiny-bf16",
        _stamp(kind="copy", source=source.name, source_hash=src_hash),
        copy,
    )
    for nbits in (int(b) for b in bits):

        def quantize(work: Path, nbits: int = nbits) -> None:
            _quantize_with_mlx_lm(source, work, nbits, int(group_size))

        result[f"q{nbits}"] = _build_atomically(
            out_dir / f"tiny-q{nbits}",
            _stamp(
                kind="mlx_lm.convert",
                source=source.name,
                source_hash=src_hash,
                bits=nbits,
                group_size=int(group_size),
                mode="affine",
            ),
            quantize,
        )
    result["draft"] = make_draft(out_dir, source=source)
    return result


def make_draft(out_dir: Path, layers: int = 1, source: Path = SOURCE_DIR) -> Path:
    """A draft model for speculative decoding of ``source``: its first ``layers`` decoder
    layers with its embeddings, final norm and head (a smaller model of the same family and
    tokenizer), in ``out_dir / "tiny-draft"``. With the adder (2 layers) and 3 draft tokens
    per step, mlx-lm accepted 141 of 300 generated tokens of the quickstart's addition
    suite (mlx-lm 0.32.2, CPU, 5 tokens per prompt)."""
    out_dir = Path(out_dir)
    stamp = _stamp(kind="draft", source=source.name, source_hash=dir_hash(source), layers=layers)

    def build(work: Path) -> None:
        work.mkdir(parents=True)
        config = json.loads((source / "config.json").read_text())
        config["num_hidden_layers"] = layers
        (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        weights = mx.load(str(source / "model.safetensors"))
        kept = {
            name: w
            for name, w in weights.items()
            if not name.startswith("model.layers.") or int(name.split(".")[2]) < layers
        }
        mx.save_safetensors(str(work / "model.safetensors"), kept, metadata={"format": "pt"})
        for f in (*TOKENIZER_FILES, "generation_config.json"):
            if (source / f).exists():
                shutil.copy(source / f, work / f)
        (work / "README.md").write_text(
            f"# tiny-draft\n\nThe first {layers} decoder layer(s) of `{source.name}`, made by "
            "`make_models.py`: a draft model for speculative decoding (same tokenizer).\n"
        )

    return _build_atomically(out_dir / "tiny-draft", stamp, build)


# --------------------------------------------------------------------------- tool model


def make_tool_model(out_dir: Path, source: Path = TOOL_SOURCE_DIR) -> Path:
    """Copy the tool-calling model ``source`` to ``out_dir / "tiny-tool"`` and write its f32
    GGUF inside that folder (:func:`tool_gguf`), so every backend gets it from one folder:
    mlx-lm, vLLM and vllm-mlx load the folder (the GGUF sits in a subfolder they ignore),
    llama-server the GGUF (with the chat template, ``--jinja``). Reused as it is when its
    stamp records the same source hash."""
    out_dir, source = Path(out_dir), Path(source)
    if not (source / "config.json").is_file():
        raise FileNotFoundError(f"no model at {source}")
    make_gguf = _load_sibling("make_gguf")
    stamp = _stamp(
        kind="tool",
        source=source.name,
        source_hash=dir_hash(source),
        gguf=str(TOOL_GGUF),
        gguf_maker_version=make_gguf.MAKER_VERSION,
    )

    def build(work: Path) -> None:
        shutil.copytree(source, work)
        make_gguf.make_gguf(work, work / TOOL_GGUF, "f32")

    return _build_atomically(out_dir / "tiny-tool", stamp, build)


def tool_gguf(folder: Path) -> Path:
    """The GGUF inside a folder made by :func:`make_tool_model`."""
    return Path(folder) / TOOL_GGUF


def _load_sibling(name: str) -> Any:
    """``examples/models/<name>.py`` as a module (``examples`` is not a package)."""
    import importlib.util
    import sys

    key = f"infercheck_example_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


# --------------------------------------------------------------------------- random model


def _random_weights(model: llama.Model, seed: int) -> dict[str, mx.array]:
    """Deterministic init: a key per parameter (split from ``seed`` in sorted-name order)."""
    params = dict(tree_flatten(model.parameters()))
    names = sorted(params)
    keys = mx.random.split(mx.random.key(seed), len(names))
    out: dict[str, mx.array] = {}
    for i, name in enumerate(names):
        p = params[name]
        if name.endswith("norm.weight"):
            w = mx.ones(p.shape)
        elif "embed_tokens" in name:
            w = mx.random.normal(p.shape, key=keys[i])
        else:  # Linear (out, in): std 1/sqrt(fan_in)
            w = mx.random.normal(p.shape, key=keys[i]) * (p.shape[-1] ** -0.5)
        out[name] = w.astype(mx.bfloat16)
    return out


def make_random_model(out_dir: Path, seed: int = 0) -> Path:
    """Make a deterministic random-weight tiny llama in ``out_dir / f"tiny-random-s{seed}"``.

    Built directly in mlx from ``RANDOM_MODEL_CONFIG`` (hidden 64, 2 layers, 4 heads) with
    ``mlx_lm.models.llama.Model``, bf16 weights, and the tiny-adder byte-level tokenizer.
    The weights depend only on ``seed``. Returns the folder (loadable with ``mlx_lm.load``).
    """
    out_dir = Path(out_dir)
    target = out_dir / f"tiny-random-s{seed}"
    config = dict(RANDOM_MODEL_CONFIG)
    tok_hash = hashlib.sha256(
        b"".join((SOURCE_DIR / f).read_bytes() for f in TOKENIZER_FILES)
    ).hexdigest()
    stamp = _stamp(kind="random", seed=int(seed), config=config, tokenizer_hash=tok_hash)

    def build(work: Path) -> None:
        model = llama.Model(llama.ModelArgs.from_dict(config))
        model.update(tree_unflatten(list(_random_weights(model, int(seed)).items())))
        mx.eval(model.parameters())
        work.mkdir(parents=True)
        mx.save_safetensors(
            str(work / "model.safetensors"),
            dict(tree_flatten(model.parameters())),
            metadata={"format": "mlx"},
        )
        mlx_lm.utils.save_config(dict(config), work / "config.json")
        for f in TOKENIZER_FILES:
            shutil.copy(SOURCE_DIR / f, work / f)
        (work / "README.md").write_text(
            f"# tiny-random-s{seed}\n\nRandom-weight llama (hidden 64, 2 layers, bf16) made "
            f"by `make_models.py` with seed {seed}; tiny-adder's byte-level tokenizer. "
            "Its outputs are meaningless but deterministic.\n"
        )

    return _build_atomically(target, stamp, build)


# --------------------------------------------------------------------------- adder helpers


def prompt_ids(a: int, b: int) -> list[int]:
    """Token ids of the adder prompt ``<s>a+b=`` (BOS + one id per byte)."""
    return [BOS_ID, *(c + BYTE_OFFSET for c in f"{a}+{b}=".encode())]


def decode_answer(tokens: Sequence[int]) -> str | None:
    """Text before the first EOS, or None if there is no EOS or a special token precedes it."""
    if EOS_ID not in tokens:
        return None
    body = list(tokens[: list(tokens).index(EOS_ID)])
    if any(t < BYTE_OFFSET for t in body):
        return None
    return bytes(t - BYTE_OFFSET for t in body).decode("utf-8", "replace")


def greedy_generate(
    model: Any, prompt: Sequence[int], max_new_tokens: int = MAX_NEW_TOKENS
) -> list[int]:
    """Greedy tokens from mlx_lm's ``generate_step`` (KV cache), stopping after EOS."""
    out: list[int] = []
    for tok, _ in generate_step(
        mx.array(list(prompt)),
        model,
        max_tokens=max_new_tokens,
        sampler=lambda lp: mx.argmax(lp, axis=-1),
    ):
        out.append(int(tok))
        if tok == EOS_ID:
            break
    return out


def adder_answers(model: Any, pairs: Iterable[tuple[int, int]]) -> list[str | None]:
    """Greedy answers of ``model`` to ``<s>a+b=`` for each pair (None: no EOS in 4 tokens)."""
    return [decode_answer(greedy_generate(model, prompt_ids(a, b))) for a, b in pairs]


def adder_accuracy(model: Any, pairs: Sequence[tuple[int, int]]) -> float:
    """Fraction of pairs whose greedy answer is exactly ``str(a + b)``."""
    answers = adder_answers(model, pairs)
    return sum(ans == str(a + b) for ans, (a, b) in zip(answers, pairs, strict=True)) / len(pairs)


def sample_pairs(n: int, seed: int = 0) -> list[tuple[int, int]]:
    """A fixed sample of ``n`` distinct pairs from ``0..99 x 0..99`` (numpy-free, stable)."""
    import random

    rng = random.Random(seed)
    idx = rng.sample(range(10_000), n)
    return [(i // 100, i % 100) for i in idx]


# --------------------------------------------------------------------------- CLI


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; prints the made folders."""
    ap = argparse.ArgumentParser(
        description="Make tiny-bf16 / tiny-q8 / tiny-q4 / tiny-draft (mlx_lm) and tiny-tool."
    )
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--bits", type=int, nargs="+", default=[8, 4])
    ap.add_argument("--group-size", type=int, default=32)
    ap.add_argument("--source", type=Path, default=SOURCE_DIR)
    ap.add_argument("--random-seed", type=int, default=None, help="also make tiny-random-s<SEED>")
    args = ap.parse_args(argv)
    made = make_variants(args.out_dir, args.bits, args.group_size, source=args.source)
    made["tool"] = make_tool_model(args.out_dir)
    made["tool-gguf"] = tool_gguf(made["tool"])
    if args.random_seed is not None:
        made["random"] = make_random_model(args.out_dir, args.random_seed)
    for key, path in made.items():
        print(f"{key}\t{path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
