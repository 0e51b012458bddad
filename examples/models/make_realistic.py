"""Make tiny random-weight models that carry a real tokenizer and a real chat template.

The material comes from the pinned ``llama-cpp-python`` sdist on PyPI (the one
``scripts/build_llama_server.sh`` builds llama-server from), and nothing else is downloaded:
``vendor/llama.cpp/models/ggml-vocab-<vocab>.gguf`` (tokens, merges, token types,
pre-tokenizer name) and ``vendor/llama.cpp/models/templates/<NAME>.jinja`` (real chat
templates). The weights are random (seeded); the model's outputs are meaningless but
deterministic, and every engine must compute the same ones.

CLI::

    python examples/models/make_realistic.py OUT_DIR --vocab qwen2|qwen35|llama-bpe \
        [--template NAME] [--seed N] \
        [--context TOKENS] [--rope-scaling linear|llama3|yarn] [--rope-factor F] \
        [--arch gemma3 --sliding-window TOKENS]

``--context`` sets the original context length (default 4096) and ``--rope-scaling`` a
RoPE scaling of it by ``--rope-factor`` (default 8, so that 4x the original context and the
tokens generated after it stay inside the scaled range): :class:`LongContext` says what
``config.json`` and the GGUF carry. ``llama3`` needs the ``llama`` architecture
(``--vocab llama-bpe``): llama.cpp applies it through the llama arch's ``rope_freqs``.
``--arch gemma3`` makes a Gemma 3 text model (``gemma3_text``, 6 layers, 5 of them local)
with the vocabulary's tokenizer and template and a sliding window of ``--sliding-window``
tokens: ``realistic_gemma3.py`` says what it carries and how its GGUF is written.

writes ``OUT_DIR`` as a Hugging Face folder that mlx-lm, mlx_lm.server and vllm-mlx load
(``config.json``, ``model.safetensors`` in float32, ``tokenizer.json``,
``tokenizer_config.json`` with the chat template, the added/special tokens and BOS/EOS of
the original model) and ``OUT_DIR/gguf/model-f32.gguf`` for llama-server.

Importable (``examples`` is not a package; load it by path with ``importlib``)::

    make_realistic(out_dir, vocab, template=None, seed=0, long=None, arch=None,
                   sliding_window=None) -> Realistic
    hf_tokenizer(vocab) -> tokenizers.Tokenizer
    sdist_models_dir() -> Path            # vendor/llama.cpp/models, extracted

Vocabularies and their defaults (:data:`VOCABS`):

- ``qwen2``: Qwen2 architecture (q/k/v biases), the Qwen2.5 template, Qwen 2.5's 22 added
  tokens (ids 151643-151664).
- ``qwen35``: Qwen3 architecture (q/k RMS norms), the Qwen3 template (``enable_thinking``),
  Qwen3's 26 added tokens (ids 151643-151668, with ``<think>`` = 151667).
- ``llama-bpe``: Llama architecture, the Llama 3.1 template (it starts with
  ``{{ bos_token }}``; tool calls use ``<|python_tag|>`` and ``<|eom_id|>``), ids
  128000-128255 special under Llama 3.1's names (``realistic/llama31-special-tokens.json``,
  with its source: the vocab GGUF is Llama 3's, whose ``<|reserved_special_token_4|>`` is
  3.1's ``<|eom_id|>`` and so on), BOS ``<|begin_of_text|>`` added by the tokenizer's
  post-processor (as Llama 3's ``tokenizer.json`` does), EOS ``<|eot_id|>`` and, in
  ``config.json`` and ``generation_config.json``, Llama 3.1 Instruct's end ids
  ``[128001, 128008, 128009]`` (the ones llama.cpp ends generation on by their spelling).

The work is done by sibling modules, loaded by path, whose names this module re-exports:
``realistic_sdist.py`` (the sdist: download, extraction, templates), ``realistic_vocab.py``
(the vocabularies and their Hugging Face tokenizers; its docstring has the rules of the
tokenizer build), ``realistic_long_context.py`` (context length and RoPE scaling),
``realistic_weights.py`` (sizes, ``config.json``, random weights), ``realistic_gguf.py`` (the
GGUF) and ``realistic_gemma3.py`` (the Gemma 3 variant); this one assembles the model folder.

Caching: the sdist is kept in ``~/.cache/pytest-infercheck/sdist`` (downloaded with ``pip
download`` on a miss) and its ``models`` folder extracted next to it; each vocabulary's
converted tokenizer is cached under ``.../models/realistic/tokenizers``. A model folder whose
stamp records the same settings is reused as it is; builds happen in a temporary folder
renamed into place.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tokenizers import Tokenizer

HERE = Path(__file__).resolve().parent
GGUF_NAME = "gguf/model-f32.gguf"


if "infercheck_siblings" not in sys.modules:  # the loader of the modules below (siblings.py)
    _spec = importlib.util.spec_from_file_location("infercheck_siblings", HERE / "siblings.py")
    assert _spec is not None and _spec.loader is not None
    sys.modules["infercheck_siblings"] = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(sys.modules["infercheck_siblings"])
_load_sibling = sys.modules["infercheck_siblings"].load_sibling


_make_gguf = _load_sibling("make_gguf")
_gemma3 = _load_sibling("realistic_gemma3")
_sdist = _load_sibling("realistic_sdist")
_vocab = _load_sibling("realistic_vocab")
_long = _load_sibling("realistic_long_context")
_weights = _load_sibling("realistic_weights")
_gguf = _load_sibling("realistic_gguf")
ARCHS = ("gemma3",)
"""``--arch`` values other than the vocabulary's own (:data:`VOCABS`)."""

# Re-exported: every name this module had before its split into the sibling modules.
# realistic_sdist.py
CACHE = _sdist.CACHE
SDIST_VERSION = _sdist.SDIST_VERSION
sdist_path = _sdist.sdist_path
sdist_models_dir = _sdist.sdist_models_dir
template_text = _sdist.template_text
# realistic_vocab.py
DATA = _vocab.DATA
SPECIAL_NAMES = _vocab.SPECIAL_NAMES
MAKER_VERSION = _vocab.MAKER_VERSION  # defined there: the tokenizer cache key holds it too
_QWEN2_REGEX = _vocab._QWEN2_REGEX
_QWEN35_REGEX = _vocab._QWEN35_REGEX
_LLAMA3_REGEX = _vocab._LLAMA3_REGEX
VocabSpec = _vocab.VocabSpec
VOCABS = _vocab.VOCABS
Vocab = _vocab.Vocab
_qwen_added = _vocab._qwen_added
special_names = _vocab.special_names
eos_ids = _vocab.eos_ids
_looks_special = _vocab._looks_special
_read_vocab = _vocab._read_vocab
_build_tokenizer = _vocab._build_tokenizer
_tokenizer_key = _vocab._tokenizer_key
_cached_vocab_dir = _vocab._cached_vocab_dir
hf_tokenizer = _vocab.hf_tokenizer
_gguf_vocab = _vocab._gguf_vocab
# realistic_long_context.py
CONTEXT = _long.CONTEXT
if TYPE_CHECKING:  # for mypy; at run time the siblings are loaded by path (_load_sibling)
    from realistic_long_context import LongContext
else:
    LongContext = _long.LongContext
ROPE_TYPES = _long.ROPE_TYPES
llama3_rope_freqs = _long.llama3_rope_freqs
# realistic_weights.py
HIDDEN = _weights.HIDDEN
LAYERS = _weights.LAYERS
HEADS = _weights.HEADS
KV_HEADS = _weights.KV_HEADS
HEAD_DIM = _weights.HEAD_DIM
INTERMEDIATE = _weights.INTERMEDIATE
HEAD_STD = _weights.HEAD_STD
model_config = _weights.model_config
random_weights = _weights.random_weights
_save_safetensors = _weights._save_safetensors
# realistic_gguf.py
_EXTRA_LAYER_TENSORS = _gguf._EXTRA_LAYER_TENSORS
_gguf_name = _gguf._gguf_name
write_gguf = _gguf.write_gguf
_add_hparams = _gguf._add_hparams
_gguf_tensors = _gguf._gguf_tensors
_add_tokenizer = _gguf._add_tokenizer
_add_rope_scaling = _gguf._add_rope_scaling


# --------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Realistic:
    """A made model: the HF folder (mlx-lm, vllm-mlx) and its GGUF (llama-server)."""

    path: Path
    gguf: Path
    vocab: str
    arch: str
    template: str
    bos_id: int | None
    eos_id: int
    vocab_size: int
    eos_ids: tuple[int, ...]
    """The end ids of ``config.json``/``generation_config.json`` (:func:`eos_ids`)."""


def _tokenizer_config(
    vocab: str, template: str, added: list[tuple[int, str, bool]], max_positions: int = CONTEXT
) -> dict[str, Any]:
    """``tokenizer_config.json`` as the original model's: added tokens, BOS/EOS/PAD, whether
    BOS is added, and the chat template."""
    spec = VOCABS[vocab]
    return {
        "add_bos_token": spec.add_bos,
        "add_eos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": {
            str(i): {
                "content": content,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": special,
            }
            for i, content, special in added
        },
        "bos_token": spec.bos,
        "eos_token": spec.eos,
        "pad_token": spec.pad,
        "unk_token": None,
        "chat_template": template,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_positions,
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }


def make_realistic(
    out_dir: Path,
    vocab: str,
    template: str | None = None,
    seed: int = 0,
    long: LongContext | None = None,
    arch: str | None = None,
    sliding_window: int | None = None,
) -> Realistic:
    """Make (or reuse) the realistic tiny model of ``vocab`` in ``out_dir``.

    Args:
        out_dir: The model folder (HF files; the GGUF at ``gguf/model-f32.gguf``).
        vocab: A key of :data:`VOCABS`.
        template: A template name of the sdist (default: the vocabulary's).
        seed: Weight seed (:func:`random_weights`).
        long: Context length and RoPE scaling (:class:`LongContext`; default 4096, none).
        arch: None (the vocabulary's architecture) or ``gemma3`` (:data:`ARCHS`): a Gemma 3
            text model with the vocabulary's tokenizer (``realistic_gemma3.py``).
        sliding_window: The Gemma 3 sliding window in tokens (required with ``gemma3``).
    """
    long = long or LongContext()
    out_dir = Path(out_dir)
    if vocab not in VOCABS:
        raise ValueError(f"vocab must be one of {sorted(VOCABS)}, got {vocab!r}")
    if arch is not None and arch not in ARCHS:
        raise ValueError(f"arch must be one of {ARCHS}, got {arch!r}")
    if (arch == "gemma3") != (sliding_window is not None):
        raise ValueError("--sliding-window goes with --arch gemma3, and gemma3 needs it")
    if arch == "gemma3" and long.rope is not None:
        raise ValueError("the gemma3 variant has no RoPE scaling here")
    spec = VOCABS[vocab]
    template_name = template or spec.template
    chat_template = template_text(template_name)
    tok_dir = _cached_vocab_dir(vocab)
    tok = Tokenizer.from_file(str(tok_dir / "tokenizer.json"))
    vocab_size = len(_gguf_vocab(vocab).tokens)
    bos_id = tok.token_to_id(spec.bos) if spec.bos else None
    eos_id = tok.token_to_id(spec.eos)
    if eos_id is None:
        raise ValueError(f"{vocab}: the EOS {spec.eos!r} is not in the tokenizer")
    pad_id = tok.token_to_id(spec.pad) if spec.pad else None
    ends = eos_ids(vocab, eos_id)
    result = Realistic(
        out_dir,
        out_dir / GGUF_NAME,
        vocab,
        _gemma3.ARCH if arch == "gemma3" else spec.arch,
        template_name,
        bos_id,
        eos_id,
        vocab_size,
        tuple(ends),
    )
    config_eos: int | list[int] = ends if len(ends) > 1 else eos_id
    stamp = {
        "maker_version": MAKER_VERSION,
        "gguf_version": _make_gguf._dist_version("gguf"),
        "vocab": vocab,
        "tokenizer": tok_dir.name,
        "template": template_name,
        "template_sha256": hashlib.sha256(chat_template.encode()).hexdigest(),
        "seed": int(seed),
    }
    if long != LongContext():
        stamp["long_context"] = {"context": long.context, "rope": long.rope, "factor": long.factor}
    if arch == "gemma3":
        stamp["gemma3"] = {"sliding_window": sliding_window, "maker": _gemma3.MAKER_VERSION}

    def build(work: Path) -> None:
        work.mkdir(parents=True)
        if sliding_window is not None:
            config = _gemma3.model_config(
                vocab_size, bos_id, config_eos, long.context, sliding_window, pad_id
            )
            tensors = _gemma3.random_weights(config, int(seed))
        else:
            config = model_config(vocab, vocab_size, bos_id, config_eos, long)
            tensors = random_weights(config, int(seed))
        _save_safetensors(work / "model.safetensors", tensors)
        (work / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        shutil.copy(tok_dir / "tokenizer.json", work / "tokenizer.json")
        config_json = _tokenizer_config(
            vocab, chat_template, _added_tokens(tok), long.max_positions
        )
        (work / "tokenizer_config.json").write_text(
            json.dumps(config_json, indent=2, ensure_ascii=False) + "\n"
        )
        (work / "generation_config.json").write_text(
            json.dumps({"bos_token_id": bos_id, "eos_token_id": config_eos}, indent=2) + "\n"
        )
        (work / "gguf").mkdir()
        write_gguf(work / GGUF_NAME, vocab, config, tensors, chat_template, bos_id, eos_id, pad_id)
        (work / "README.md").write_text(
            f"# tiny realistic {vocab}\n\nRandom-weight {config['model_type']} (hidden "
            f"{HIDDEN}, {config['num_hidden_layers']} layers, float32, seed {seed}) made by "
            "`make_realistic.py` with the real "
            f"`{vocab}` tokenizer of llama.cpp's vocab GGUF (llama-cpp-python {SDIST_VERSION}) "
            f"and the chat template `{template_name}`. Outputs are meaningless but "
            "deterministic.\n"
        )

    # make_models imports mlx_lm: loaded here, so the tokenizer functions do not need it.
    _load_sibling("make_models")._build_atomically(out_dir, stamp, build)
    return result


def _added_tokens(tok: Tokenizer) -> list[tuple[int, str, bool]]:
    """``(id, content, special)`` of the tokenizer's added tokens, in id order."""
    return [
        (int(i), str(t.content), bool(t.special))
        for i, t in sorted(tok.get_added_tokens_decoder().items())
    ]


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; prints the folder, the GGUF and the seconds taken."""
    ap = argparse.ArgumentParser(description="Make a tiny random model with a real tokenizer.")
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--vocab", choices=sorted(VOCABS), required=True)
    ap.add_argument("--template", default=None, help="a models/templates/<NAME>.jinja name")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--context", type=int, default=CONTEXT, help="the original context length in tokens"
    )
    ap.add_argument("--rope-scaling", choices=ROPE_TYPES, default=None)
    ap.add_argument("--rope-factor", type=float, default=8.0)
    ap.add_argument("--arch", choices=ARCHS, default=None, help="gemma3: sliding window")
    ap.add_argument("--sliding-window", type=int, default=None, help="tokens (gemma3)")
    args = ap.parse_args(argv)
    start = time.monotonic()
    long = LongContext(args.context, args.rope_scaling, args.rope_factor)
    made = make_realistic(
        args.out_dir, args.vocab, args.template, args.seed, long, args.arch, args.sliding_window
    )
    print(f"{made.path}\n{made.gguf}\n{time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
