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

Rules of the tokenizer build (``tokenizers`` only, no torch; it reproduces llama.cpp's test
vectors, see ``tests/unit/test_realistic_tokenizers.py``):

- BPE over the GGUF's NORMAL tokens and merges; ``ignore_merges`` for llama-bpe (as
  llama.cpp's ``llama3`` pre-tokenizer), not for Qwen.
- Pre-tokenizer: ``Split(<the original tokenizer.json regex of that pre name>, isolated)``
  then ``ByteLevel(add_prefix_space=False, use_regex=False)``; ByteLevel decoder.
- Normalizer NFC for qwen2 (as Qwen 2/2.5/3's ``tokenizer.json``; llama.cpp does not
  normalize, so a decomposed ``e`` + U+0301 is one token fewer in HF than in llama.cpp: a
  property of the two tokenizers, not a bug); none for qwen35 (its regex keeps marks with
  letters, and llama.cpp's vectors for it are not normalized) and Llama 3.
- Added tokens at their real ids (``realistic/qwen-added-tokens.json``, with its source, for
  Qwen; the GGUF's CONTROL tokens, renamed to Llama 3.1's special tokens, for Llama 3: the
  GGUF written here carries the new names too). The Qwen vocab GGUFs predate Qwen 2.5:
  their ids 151646+ are ``[PADn]``; those are left out of the HF vocabulary, and the GGUF
  written here marks the ids no added token uses UNUSED, the added ones CONTROL when special
  or spelled ``<|...|>`` and USER_DEFINED otherwise (the rule of llama.cpp's
  ``convert_hf_to_gguf.py``).

GGUF tensors: as llama.cpp's converter names them; the ``llama`` architecture gets the q/k
row permutation of ``make_gguf.py`` (rotate-half -> interleaved RoPE); ``qwen2``/``qwen3``
use NeoX RoPE and are not permuted.

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
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import gguf
import numpy as np
from tokenizers import (
    AddedToken,
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

HERE = Path(__file__).resolve().parent
DATA = HERE / "realistic"
SPECIAL_NAMES = {"llama-bpe": "llama31-special-tokens.json"}
"""Vocabularies whose GGUF CONTROL tokens are renamed, and the data file with the names (by
id), the source and the model's end ids (``eos_token_id``)."""
CACHE = Path(os.environ.get("INFERCHECK_CACHE") or Path.home() / ".cache" / "pytest-infercheck")
SDIST_VERSION = os.environ.get("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", "0.3.36")
MAKER_VERSION = 2
GGUF_NAME = "gguf/model-f32.gguf"


def _load_sibling(name: str) -> ModuleType:
    """``examples/models/<name>.py`` as a module (``examples`` is not a package)."""
    spec = importlib.util.spec_from_file_location(f"infercheck_{name}", HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_make_gguf = _load_sibling("make_gguf")
_gemma3 = _load_sibling("realistic_gemma3")
ARCHS = ("gemma3",)
"""``--arch`` values other than the vocabulary's own (:data:`VOCABS`)."""

# The original (Hugging Face ``tokenizer.json``) regexes of llama.cpp's pre-tokenizer names,
# as quoted in llama.cpp's ``src/llama-vocab.cpp``.
_QWEN2_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
    r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


@dataclass(frozen=True)
class VocabSpec:
    """How one vocabulary becomes a model: tokenizer rules, architecture and defaults."""

    regex: str
    ignore_merges: bool
    nfc: bool
    arch: str
    """mlx-lm ``model_type`` and llama.cpp architecture: ``qwen2``, ``qwen3`` or ``llama``."""
    template: str
    """Default template: ``models/templates/<template>.jinja`` of the sdist."""
    added_last_id: int | None
    """Qwen: the last of :data:`QWEN_ADDED`'s ids this model has; None: the GGUF's own."""
    bos: str | None
    eos: str
    pad: str | None
    add_bos: bool
    rope_theta: float


VOCABS: dict[str, VocabSpec] = {
    "qwen2": VocabSpec(
        regex=_QWEN2_REGEX,
        ignore_merges=False,
        nfc=True,
        arch="qwen2",
        template="Qwen-Qwen2.5-7B-Instruct",
        added_last_id=151664,
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        add_bos=False,
        rope_theta=1_000_000.0,
    ),
    "qwen35": VocabSpec(
        regex=_QWEN35_REGEX,
        ignore_merges=False,
        nfc=False,
        arch="qwen3",
        template="Qwen-Qwen3-0.6B",
        added_last_id=151668,
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        add_bos=False,
        rope_theta=1_000_000.0,
    ),
    "llama-bpe": VocabSpec(
        regex=_LLAMA3_REGEX,
        ignore_merges=True,
        nfc=False,
        arch="llama",
        template="meta-llama-Llama-3.1-8B-Instruct",
        added_last_id=None,
        bos="<|begin_of_text|>",
        eos="<|eot_id|>",
        pad=None,
        add_bos=True,
        rope_theta=500_000.0,
    ),
}

HIDDEN = 64
LAYERS = 2
HEADS = 2
KV_HEADS = 1
HEAD_DIM = HIDDEN // HEADS
"""32: the smallest head size vLLM's CPU attention supports (16 passes ``/health`` and kills
the engine on the first request), so that every engine serves the same models."""
INTERMEDIATE = 128
CONTEXT = 4096
HEAD_STD = 0.5
"""Std of the untied output head: logits spread enough that greedy choices are decisive."""


# --------------------------------------------------------------------------- the sdist


def sdist_path() -> Path:
    """The pinned llama-cpp-python sdist, kept in the cache (``pip download`` on a miss)."""
    folder = CACHE / "sdist"
    found = sorted(folder.glob(f"llama_cpp_python-{SDIST_VERSION}.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={SDIST_VERSION}",
                "-d",
                tmp,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (got,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        os.replace(got, folder / got.name)
    return folder / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"


def sdist_models_dir() -> Path:
    """``vendor/llama.cpp/models`` of the sdist (vocab GGUFs, test vectors, templates),
    extracted once into the cache (atomically)."""
    target = CACHE / "sdist" / f"llama.cpp-models-{SDIST_VERSION}"
    if (target / "templates").is_dir():
        return target
    sdist = sdist_path()
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/"
    with tempfile.TemporaryDirectory(prefix=".extract-", dir=target.parent) as tmp:
        work = Path(tmp) / "models"
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                rel = member.name[len(prefix) :]
                if not member.isfile() or not member.name.startswith(prefix):
                    continue
                if not (rel.startswith("ggml-vocab-") or rel.startswith("templates/")):
                    continue
                dest = work / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                dest.write_bytes(source.read())
        try:
            os.replace(work, target)
        except OSError:
            if not (target / "templates").is_dir():
                raise
    return target


def template_text(name: str) -> str:
    """The chat template ``models/templates/<name>.jinja`` of the sdist."""
    path = sdist_models_dir() / "templates" / f"{name}.jinja"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.jinja"))
        raise ValueError(f"no template {name!r}; the sdist has: {', '.join(names)}")
    return path.read_text()


# --------------------------------------------------------------------------- vocabulary


@dataclass(frozen=True)
class Vocab:
    """A vocab GGUF's tokenizer, with the real added tokens in place of ``[PADn]``."""

    tokens: list[str]
    types: list[int]
    """``gguf.TokenType`` per id, as the GGUF written here stores it."""
    merges: list[str]
    pre: str
    added: list[tuple[int, str, bool]]
    """``(id, content, special)`` of the HF added tokens, in id order."""


def _qwen_added(last_id: int) -> list[tuple[int, str, bool]]:
    """``(id, content, special)`` of Qwen's added tokens up to ``last_id`` (the data file)."""
    data = json.loads((DATA / "qwen-added-tokens.json").read_text())
    return [
        (int(t["id"]), str(t["content"]), bool(t["special"]))
        for t in data["tokens"]
        if int(t["id"]) <= last_id
    ]


def special_names(vocab: str) -> dict[int, str]:
    """``{id: content}`` of the special tokens that replace ``vocab``'s GGUF CONTROL tokens
    (:data:`SPECIAL_NAMES`; empty for a vocabulary that keeps its own): the data file's
    named tokens, then its numbered ``reserved`` fill up to the last id."""
    if vocab not in SPECIAL_NAMES:
        return {}
    data = json.loads((DATA / SPECIAL_NAMES[vocab]).read_text())
    names = {int(t["id"]): str(t["content"]) for t in data["tokens"]}
    fill = data["reserved"]
    first, last, index = int(fill["first_id"]), int(fill["last_id"]), int(fill["first_index"])
    for i in range(first, last + 1):
        names[i] = str(fill["content"]).format(index=index + i - first)
    return names


def eos_ids(vocab: str, eos_id: int) -> list[int]:
    """The ids ``config.json`` and ``generation_config.json`` end generation on: the data
    file's ``eos_token_id`` (Llama 3.1 Instruct's three) or the tokenizer's EOS alone. The
    GGUF keeps the one EOS: llama.cpp adds the others by their spelling."""
    if vocab not in SPECIAL_NAMES:
        return [eos_id]
    ids = [int(i) for i in json.loads((DATA / SPECIAL_NAMES[vocab]).read_text())["eos_token_id"]]
    if eos_id not in ids:
        raise ValueError(f"{vocab}: the EOS {eos_id} is not among the end ids {ids}")
    return ids


def _looks_special(token: str) -> bool:
    """llama.cpp's converter treats an added token spelled ``<|...|>`` as CONTROL."""
    return token.startswith("<|") and token.endswith("|>")


def _read_vocab(vocab: str) -> Vocab:
    """The vocab GGUF of the sdist, with Qwen's ``[PADn]`` ids replaced by the added tokens
    (see the module docstring for the token types)."""
    spec = VOCABS[vocab]
    reader = gguf.GGUFReader(sdist_models_dir() / f"ggml-vocab-{vocab}.gguf")
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    types = [int(t) for t in reader.fields["tokenizer.ggml.token_type"].contents()]
    merges = list(reader.fields["tokenizer.ggml.merges"].contents())
    pre = str(reader.fields["tokenizer.ggml.pre"].contents())
    if spec.added_last_id is None:
        control_ids = [i for i, t in enumerate(types) if t == gguf.TokenType.CONTROL]
        names = special_names(vocab)
        if names:
            if sorted(names) != control_ids:
                raise ValueError(f"{vocab}: the special names do not cover the CONTROL ids")
            kept = [i for i in control_ids if tokens[i] == names[i]]
            for i in control_ids:
                tokens[i] = names[i]
            # The tokens both generations name alike must not move: a check on the data file.
            for must in ("<|begin_of_text|>", "<|start_header_id|>", "<|eot_id|>"):
                if not any(tokens[i] == must for i in kept):
                    raise ValueError(f"{vocab}: {must} is not where the vocab GGUF has it")
        added = [(i, tokens[i], True) for i in control_ids]
    else:
        added = _qwen_added(spec.added_last_id)
        for i in range(len(tokens)):
            if types[i] != gguf.TokenType.NORMAL:
                types[i] = int(gguf.TokenType.UNUSED)
                tokens[i] = f"[PAD{i}]"
        for i, content, special in added:
            tokens[i] = content
            control = special or _looks_special(content)
            types[i] = int(gguf.TokenType.CONTROL if control else gguf.TokenType.USER_DEFINED)
    return Vocab(tokens, types, merges, pre, added)


def _build_tokenizer(vocab: str, v: Vocab) -> Tokenizer:
    """The ``tokenizers`` tokenizer of ``vocab`` (rules in the module docstring)."""
    spec = VOCABS[vocab]
    bpe_vocab = {t: i for i, t in enumerate(v.tokens) if v.types[i] == gguf.TokenType.NORMAL}
    merges = [tuple(m.split(" ", 1)) for m in v.merges]
    tok = Tokenizer(
        models.BPE(
            vocab=bpe_vocab,
            merges=merges,
            ignore_merges=spec.ignore_merges,
            fuse_unk=False,
            byte_fallback=False,
        )
    )
    if spec.nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(spec.regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    level = processors.ByteLevel(trim_offsets=False)
    if spec.bos is not None:
        bos_id = v.tokens.index(spec.bos)
        tok.post_processor = processors.Sequence(
            [
                level,
                processors.TemplateProcessing(
                    single=f"{spec.bos}:0 $A:0",
                    pair=f"{spec.bos}:0 $A:0 {spec.bos}:1 $B:1",
                    special_tokens=[(spec.bos, bos_id)],
                ),
            ]
        )
    else:
        tok.post_processor = level
    for i, content, special in v.added:
        if tok.get_vocab_size(with_added_tokens=True) != i:
            raise ValueError(f"{vocab}: added token {content!r} would not get its id {i}")
        tok.add_tokens([AddedToken(content, special=special, normalized=False)])
    return tok


def _tokenizer_key(vocab: str) -> str:
    """Cache key of a converted tokenizer: maker and sdist versions, the rules, the data."""
    h = hashlib.sha256()
    h.update(json.dumps([MAKER_VERSION, SDIST_VERSION, vocab, repr(VOCABS[vocab])]).encode())
    h.update((DATA / "qwen-added-tokens.json").read_bytes())
    if vocab in SPECIAL_NAMES:  # only then: the other vocabularies' caches stay valid
        h.update((DATA / SPECIAL_NAMES[vocab]).read_bytes())
    return h.hexdigest()[:16]


def _cached_vocab_dir(vocab: str) -> Path:
    """Cache folder with ``tokenizer.json`` and ``gguf-vocab.json`` (tokens, types, merges,
    pre) for ``vocab``: reading a vocab GGUF takes seconds, so it is done once."""
    if vocab not in VOCABS:
        raise ValueError(f"vocab must be one of {sorted(VOCABS)}, got {vocab!r}")
    target = CACHE / "models" / "realistic" / "tokenizers" / f"{vocab}-{_tokenizer_key(vocab)}"
    if (target / "tokenizer.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=f".{vocab}-", dir=target.parent) as tmp:
        work = Path(tmp) / "out"
        work.mkdir()
        v = _read_vocab(vocab)
        (work / "gguf-vocab.json").write_text(
            json.dumps(
                {"tokens": v.tokens, "types": v.types, "merges": v.merges, "pre": v.pre},
                ensure_ascii=False,
            )
        )
        _build_tokenizer(vocab, v).save(str(work / "tokenizer.json"))
        try:
            os.replace(work, target)
        except OSError:
            if not (target / "tokenizer.json").is_file():
                raise
    return target


def hf_tokenizer(vocab: str) -> Tokenizer:
    """The converted Hugging Face tokenizer of ``vocab`` (cached)."""
    return Tokenizer.from_file(str(_cached_vocab_dir(vocab) / "tokenizer.json"))


def _gguf_vocab(vocab: str) -> Vocab:
    """The cached GGUF vocabulary of ``vocab`` (tokens, types, merges, pre-tokenizer)."""
    data = json.loads((_cached_vocab_dir(vocab) / "gguf-vocab.json").read_text())
    return Vocab(data["tokens"], data["types"], data["merges"], data["pre"], [])


# --------------------------------------------------------------------------- weights


@dataclass(frozen=True)
class LongContext:
    """The long-context variant of a model: an original context, RoPE scaling or not.

    ``config.json`` takes Hugging Face's conventions (as Llama 3.1, Qwen 2.5 and Llama 2's
    linear-scaled fine-tunes write them):

    - no scaling: ``max_position_embeddings = context``;
    - ``linear``: ``rope_scaling = {rope_type: linear, factor}``,
      ``max_position_embeddings = context`` (HF's linear has no original length);
    - ``llama3``: ``{rope_type: llama3, factor, low_freq_factor: 1, high_freq_factor: 4,
      original_max_position_embeddings: context}``, ``max_position_embeddings = context *
      factor``;
    - ``yarn``: ``{rope_type: yarn, factor, original_max_position_embeddings: context}``,
      ``max_position_embeddings = context * factor``.

    The GGUF carries the same, as llama.cpp's ``convert_hf_to_gguf.py`` writes it
    (``conversion/base.py`` ``set_gguf_parameters``; ``conversion/llama.py``
    ``generate_extra_tensors``): ``linear`` and ``yarn`` as ``rope.scaling.type`` and
    ``.factor`` (yarn also ``.original_context_length``), ``llama3`` as the
    ``rope_freqs.weight`` tensor of per-frequency divisors (:func:`llama3_rope_freqs`).
    """

    context: int = CONTEXT
    rope: str | None = None
    """None, ``linear``, ``llama3`` or ``yarn`` (:data:`ROPE_TYPES`)."""
    factor: float = 8.0

    def __post_init__(self) -> None:
        if self.rope is not None and self.rope not in ROPE_TYPES:
            raise ValueError(f"rope must be one of {ROPE_TYPES}, got {self.rope!r}")
        if self.context < 8:
            raise ValueError(f"context must be at least 8 tokens, got {self.context}")
        if self.rope is not None and not self.factor > 1:
            raise ValueError(f"the RoPE factor must be above 1, got {self.factor}")

    @property
    def max_positions(self) -> int:
        """``max_position_embeddings`` of ``config.json`` (see the class docstring)."""
        if self.rope in ("llama3", "yarn"):
            return int(self.context * self.factor)
        return self.context

    def rope_scaling(self) -> dict[str, Any] | None:
        """``rope_scaling`` of ``config.json``, or None."""
        if self.rope is None:
            return None
        out: dict[str, Any] = {"rope_type": self.rope, "factor": float(self.factor)}
        if self.rope == "llama3":
            out.update(low_freq_factor=1.0, high_freq_factor=4.0)
        if self.rope in ("llama3", "yarn"):
            out["original_max_position_embeddings"] = self.context
        return out


ROPE_TYPES = ("linear", "llama3", "yarn")


def llama3_rope_freqs(rope_theta: float, head_dim: int, scaling: dict[str, Any]) -> np.ndarray:
    """The ``rope_freqs.weight`` of a ``llama3`` RoPE, as llama.cpp's converter computes it.

    For each frequency ``f_i = theta^(-2i/d)`` with wavelength ``w = 2 pi / f_i``: divisor 1
    when ``w < L / high``, ``factor`` when ``w > L / low``, else ``1 / ((1 - s) / factor +
    s)`` with ``s = (L / w - low) / (high - low)`` (``L`` the original context).
    """
    freqs = 1.0 / (rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float32) / head_dim))
    factor = float(scaling["factor"])
    low = float(scaling.get("low_freq_factor", 1.0))
    high = float(scaling.get("high_freq_factor", 4.0))
    old = float(scaling.get("original_max_position_embeddings", 8192))
    out = []
    for freq in freqs:
        wavelen = 2 * np.pi / float(freq)
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(out, dtype=np.float32)


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
    spec = VOCABS[vocab]
    long = long or LongContext()
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


# --------------------------------------------------------------------------- GGUF

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
    spec = VOCABS[vocab]
    v = _gguf_vocab(vocab)
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
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INTERMEDIATE)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_rope_freq_base(spec.rope_theta)
    writer.add_layer_norm_rms_eps(float(config["rms_norm_eps"]))
    if spec.arch == "llama":
        writer.add_rope_dimension_count(HEAD_DIM)
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
            arr = _make_gguf.permute_qk(arr, HEADS, HEADS)
        elif spec.arch == "llama" and hf_name.endswith("self_attn.k_proj.weight"):
            arr = _make_gguf.permute_qk(arr, HEADS, KV_HEADS)
        yield _gguf_name(hf_name), np.ascontiguousarray(arr, dtype=np.float32)
    scaling = config.get("rope_scaling")
    if scaling is not None and scaling["rope_type"] == "llama3":
        if spec.arch != "llama":
            raise ValueError("llama3 RoPE scaling is llama.cpp's rope_freqs of the llama arch")
        yield "rope_freqs.weight", llama3_rope_freqs(spec.rope_theta, HEAD_DIM, scaling)


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
    spec = VOCABS[vocab]
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
