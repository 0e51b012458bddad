"""Make a tiny LoRA adapter for the tiny adder, in each engine's format, and its merged model.

The adapter is rank 4 on the q and v projections of both layers, written from seeded random
matrices (numpy ``default_rng(seed)``), no training: ``A`` (rank x in) and ``B`` (out x rank)
with normal entries of standard deviations ``A_STD`` and ``B_STD``, large enough that the
adapter changes answers (see :data:`MEASURED`). With PEFT's convention (``lora_alpha / r``
scale, no rsLoRA) each adapted projection computes

    y = W x + scale * B (A x),        scale = lora_alpha / r = 8 / 4 = 2,

so the merged weights are ``W' = W + scale * B @ A`` (float32: the base's bf16 weights
widened exactly, the product in float32).

Files (``make_lora(out_dir)``; ``out_dir / "tiny-adder-lora"``, or for another ``seed``
``out_dir / "tiny-adder-lora-seedN"``: a second adapter of the same base, with other random
matrices, as the isolation scenario serves beside the first):

- ``adapter/``: ONE folder in two formats. ``adapters.safetensors`` + ``adapter_config.json``
  for mlx-lm (``load(base, adapter_path=...)``: ``lora_a = A.T`` (in, r), ``lora_b = B.T``
  (r, out), ``lora_parameters.scale = 2``); ``adapter_model.safetensors`` (PEFT names
  ``base_model.model.model.layers.L.self_attn.q_proj.lora_A.weight`` (r, in) and
  ``lora_B.weight`` (out, r)) for vLLM (``--enable-lora --lora-modules NAME=adapter/``) and
  for llama.cpp's converter. ``adapter_config.json`` carries both key sets: mlx-lm reads
  ``fine_tune_type``, ``num_layers``, ``lora_parameters``; vLLM's ``PEFTHelper.from_dict``
  keeps only its own fields (``r``, ``lora_alpha``, ``target_modules``, ...).
- ``merged/``: the base with ``W'`` in float32 (``config.json`` says float32), tokenizer
  copied: a plain model, for mlx-lm in-process (the reference an engine's adapter is
  diffed against).

The GGUF LoRA for llama-server (``--lora FILE``) is made by llama.cpp's own
``convert_lora_to_gguf.py``, taken from the llama.cpp sources vendored in the
``llama-cpp-python`` sdist that ``scripts/build_llama_server.sh`` downloads (it permutes
``lora_B``'s rows of q as ``convert_hf_to_gguf.py`` permutes q). The converter needs torch
and transformers, which this repo's venv does not hold: :func:`lora_gguf` runs it with
another interpreter that has them (the tests use vLLM's CPU venv, ``scripts/install_vllm.sh``).

CLI::

    python examples/models/make_lora.py OUT_DIR [--base DIR] [--gguf-python PYTHON]

Importable (load by path; ``examples`` is not a package)::

    make_lora(out_dir, base=SOURCE_DIR, seed=0) -> Lora(folder, adapter, merged)
    lora_gguf(lora, base, python, out) -> Path   # the f32 GGUF adapter

Re-running is cheap: a folder (or GGUF) whose stamp records the same inputs is left alone.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import save_file

HERE = Path(__file__).resolve().parent
SOURCE_DIR = HERE / "tiny-adder"
RANK = 4
LORA_ALPHA = 8.0
SCALE = LORA_ALPHA / RANK
TARGETS = ("q_proj", "v_proj")
A_STD = 0.1
B_STD = 0.1
MAKER_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json")
LLAMA_CPP_PYTHON_VERSION = os.environ.get("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", "0.3.36")

MEASURED = (
    "seed 0 on tiny-adder, mlx-lm float32, greedy on sample_pairs(100): the adapter changes "
    "28 of 100 answers, every answer still a number; merged and base + adapter logits differ "
    "by at most 1.8e-5 (tests/unit/test_tiny_lora.py)"
)


@dataclass(frozen=True)
class Lora:
    """The folders :func:`make_lora` wrote."""

    folder: Path
    adapter: Path
    """mlx-lm adapter folder and PEFT folder in one (``adapter_config.json`` for both)."""
    merged: Path
    """The base with the adapter merged in, float32."""


def _models() -> Any:
    """``make_models.py`` (stamps, atomic folders, safetensors reading via make_gguf)."""
    import importlib.util
    import sys

    key = "infercheck_example_make_models"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / "make_models.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        spec.loader.exec_module(module)
    return sys.modules[key]


def lora_matrices(config: dict[str, Any], seed: int) -> dict[tuple[int, str], tuple[Any, Any]]:
    """``(A, B)`` per ``(layer, projection)``: float32 normal draws from one
    ``numpy.random.default_rng(seed)`` in layer then :data:`TARGETS` order, A (rank x in) of
    std :data:`A_STD`, then B (out x rank) of std :data:`B_STD`."""
    rng = np.random.default_rng(seed)
    hidden = int(config["hidden_size"])
    head_dim = int(config.get("head_dim") or hidden // int(config["num_attention_heads"]))
    outs = {
        "q_proj": int(config["num_attention_heads"]) * head_dim,
        "v_proj": int(config.get("num_key_value_heads") or config["num_attention_heads"])
        * head_dim,
    }
    out = {}
    for layer in range(int(config["num_hidden_layers"])):
        for proj in TARGETS:
            a = (rng.standard_normal((RANK, hidden)) * A_STD).astype(np.float32)
            b = (rng.standard_normal((outs[proj], RANK)) * B_STD).astype(np.float32)
            out[(layer, proj)] = (a, b)
    return out


def adapter_config(config: dict[str, Any], base: Path) -> dict[str, Any]:
    """``adapter_config.json`` for mlx-lm and PEFT/vLLM at once (see the module docstring)."""
    return {
        # mlx-lm (mlx_lm.tuner.utils.load_adapters)
        "fine_tune_type": "lora",
        "num_layers": int(config["num_hidden_layers"]),
        "lora_parameters": {
            "rank": RANK,
            "scale": SCALE,
            "dropout": 0.0,
            "keys": [f"self_attn.{p}" for p in TARGETS],
        },
        # PEFT (vLLM's PEFTHelper, llama.cpp's convert_lora_to_gguf.py)
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(base),
        "r": RANK,
        "lora_alpha": LORA_ALPHA,
        "lora_dropout": 0.0,
        "target_modules": list(TARGETS),
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "modules_to_save": None,
        "inference_mode": True,
    }


def _build(work: Path, base: Path, seed: int) -> None:
    config = json.loads((base / "config.json").read_text())
    weights: dict[str, Any] = (
        _models()._load_sibling("make_gguf").read_safetensors(base / "model.safetensors")
    )
    mats = lora_matrices(config, seed)
    adapter = work / "adapter"
    adapter.mkdir(parents=True)
    mlx, peft = {}, {}
    for (layer, proj), (a, b) in mats.items():
        path = f"model.layers.{layer}.self_attn.{proj}"
        mlx[f"{path}.lora_a"] = np.ascontiguousarray(a.T)
        mlx[f"{path}.lora_b"] = np.ascontiguousarray(b.T)
        peft[f"base_model.model.{path}.lora_A.weight"] = a
        peft[f"base_model.model.{path}.lora_B.weight"] = b
        weight = weights[f"{path}.weight"]
        weights[f"{path}.weight"] = (weight + np.float32(SCALE) * (b @ a)).astype(np.float32)
    save_file(mlx, str(adapter / "adapters.safetensors"))
    save_file(peft, str(adapter / "adapter_model.safetensors"))
    (adapter / "adapter_config.json").write_text(
        json.dumps(adapter_config(config, base), indent=2) + "\n"
    )
    merged = work / "merged"
    merged.mkdir()
    save_file(
        {k: np.ascontiguousarray(v, dtype=np.float32) for k, v in weights.items()},
        str(merged / "model.safetensors"),
        metadata={"format": "pt"},
    )
    merged_config = {**config, "dtype": "float32", "torch_dtype": "float32"}
    (merged / "config.json").write_text(json.dumps(merged_config, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        if (base / name).is_file():
            shutil.copy(base / name, merged / name)
    (work / "README.md").write_text(
        f"# tiny-adder-lora\n\nA rank-{RANK} LoRA (q_proj, v_proj; scale {SCALE}) of "
        f"`{base.name}`, seeded random (seed {seed}), made by `make_lora.py`: `adapter/` (mlx-lm "
        "and PEFT formats), `merged/` (base + scale * B @ A, float32).\n"
    )


def folder_name(seed: int) -> str:
    """The adapter's folder: ``tiny-adder-lora`` for seed 0, ``tiny-adder-lora-seedN`` for
    another seed (a second adapter of the same base, for the isolation scenario)."""
    return "tiny-adder-lora" if seed == 0 else f"tiny-adder-lora-seed{seed}"


def make_lora(out_dir: Path, base: Path = SOURCE_DIR, seed: int = 0) -> Lora:
    """Write ``out_dir / folder_name(seed)`` (``adapter/``, ``merged/``; the module
    docstring) for the model at ``base``; reused when its stamp matches."""
    models = _models()
    base = Path(base).resolve()
    target = Path(out_dir) / folder_name(int(seed))
    stamp = models._stamp(
        kind="lora",
        lora_maker=MAKER_VERSION,
        seed=int(seed),
        rank=RANK,
        alpha=LORA_ALPHA,
        std=[A_STD, B_STD],
        base=str(base),
        base_hash=models.dir_hash(base),
    )
    models._build_atomically(target, stamp, lambda work: _build(work, base, int(seed)))
    return Lora(target, target / "adapter", target / "merged")


# --------------------------------------------------------------------------- GGUF


def converter_dir(cache: Path | None = None) -> Path:
    """llama.cpp's ``convert_lora_to_gguf.py`` with what it imports (``conversion/``,
    ``gguf-py/``), extracted once from the cached ``llama-cpp-python`` sdist (downloaded by
    ``scripts/build_llama_server.sh``) into ``<cache>/llama.cpp-convert-<version>``."""
    root = cache or Path(
        os.environ.get("INFERCHECK_CACHE") or Path.home() / ".cache" / "pytest-infercheck"
    )
    version = LLAMA_CPP_PYTHON_VERSION
    target = root / f"llama.cpp-convert-{version}"
    if (target / "convert_lora_to_gguf.py").is_file():
        return target
    sdist = root / "sdist" / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        raise FileNotFoundError(f"{sdist} is missing: run scripts/build_llama_server.sh first")
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    wanted = ("convert_lora_to_gguf.py", "convert_hf_to_gguf.py", "conversion/", "gguf-py/")
    with tempfile.TemporaryDirectory(dir=root, prefix=".convert-") as tmp:
        with tarfile.open(sdist) as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.name.startswith(prefix) and m.name[len(prefix) :].startswith(wanted)
            ]
            tar.extractall(tmp, members=members, filter="data")
        try:
            os.replace(Path(tmp) / prefix, target)
        except OSError:
            if not (target / "convert_lora_to_gguf.py").is_file():
                raise
    return target


def lora_gguf(lora: Lora, base: Path, python: Path, out: Path | None = None) -> Path:
    """The adapter as an f32 GGUF LoRA (``lora.folder / "adapter-f32.gguf"`` by default),
    converted by llama.cpp's ``convert_lora_to_gguf.py --base BASE --outtype f32`` run with
    ``python`` (an interpreter with torch and transformers); reused when its stamp records
    the same adapter."""
    out = Path(out) if out is not None else lora.folder / "adapter-f32.gguf"
    convert = converter_dir()
    stamp = {
        "adapter": hashlib.sha256(
            (lora.adapter / "adapter_model.safetensors").read_bytes()
        ).hexdigest(),
        "converter": str(convert),
        "base": str(Path(base).resolve()),
    }
    stamp_path = out.with_name(out.name + ".stamp.json")
    try:
        if out.is_file() and json.loads(stamp_path.read_text()) == stamp:
            return out
    except (OSError, ValueError):
        pass
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    env = {**os.environ, "PYTHONPATH": str(convert / "gguf-py"), "HF_HUB_OFFLINE": "1"}
    command = [str(python), str(convert / "convert_lora_to_gguf.py"), "--outtype", "f32"]
    command += ["--base", str(base), "--outfile", str(tmp), str(lora.adapter)]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        raise RuntimeError(
            f"convert_lora_to_gguf.py failed ({done.returncode}): {done.stderr[-3000:]}"
        )
    os.replace(tmp, out)
    stamp_path.write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; prints the adapter folder, the merged model and the GGUF if made."""
    ap = argparse.ArgumentParser(description="Make the tiny adder's LoRA adapter.")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--base", type=Path, default=SOURCE_DIR)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--gguf-python", type=Path, help="a python with torch and transformers")
    args = ap.parse_args(argv)
    lora = make_lora(args.out_dir, args.base, args.seed)
    print(lora.adapter)
    print(lora.merged)
    if args.gguf_python is not None:
        print(lora_gguf(lora, args.base, args.gguf_python))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
