"""The realistic models' Hugging Face tokenizers (examples/models/make_realistic.py) against
llama.cpp's own tokenizer test vectors, one case per vector line, and the properties the
vectors do not show: added tokens at their real ids, NFC, BOS. (The GGUF's token types are
checked in tests/integration/test_realistic_models.py: reading a 152k-token GGUF takes
seconds.)"""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
from tokenizers import Tokenizer

from conftest import load_example

SEPARATOR = "\n__ggml_vocab_test__\n"
VECTOR_COUNTS = {"qwen2": 46, "qwen35": 50, "llama-bpe": 46}
"""Lines of ``ggml-vocab-<vocab>.gguf.inp``/``.out`` in llama-cpp-python 0.3.36."""

THINK = 151667
IM_START = 151644
BEGIN_OF_TEXT = 128000


def maker() -> Any:
    return load_example("make_realistic")


@cache
def tokenizer(vocab: str) -> Tokenizer:
    result: Tokenizer = maker().hf_tokenizer(vocab)
    return result


@cache
def vectors(vocab: str) -> list[tuple[str, list[int]]]:
    """``(input text, expected ids)`` per line; ids without BOS (``add_special=false``)."""
    models = maker().sdist_models_dir()
    inputs = (models / f"ggml-vocab-{vocab}.gguf.inp").read_text(encoding="utf-8")
    texts = inputs.split(SEPARATOR)
    assert texts[-1] == "", "the .inp file ends with a separator"
    outputs = (models / f"ggml-vocab-{vocab}.gguf.out").read_text(encoding="utf-8")
    lines = outputs.split("\n")
    assert lines[-1] == "", "the .out file ends with a newline"
    assert len(texts) == len(lines)
    return [
        (t, [int(i) for i in line.split()]) for t, line in zip(texts[:-1], lines[:-1], strict=True)
    ]


@pytest.mark.parametrize("vocab", sorted(VECTOR_COUNTS))
def test_vector_files_have_the_expected_lines(vocab: str) -> None:
    assert len(vectors(vocab)) == VECTOR_COUNTS[vocab]


@pytest.mark.parametrize(
    ("vocab", "line"),
    [(v, n) for v, count in sorted(VECTOR_COUNTS.items()) for n in range(count)],
    ids=lambda x: x if isinstance(x, str) else f"line{x:02d}",
)
def test_hf_tokenizer_reproduces_llama_cpp_vector(vocab: str, line: int) -> None:
    text, expected = vectors(vocab)[line]
    got = tokenizer(vocab).encode(text, add_special_tokens=False).ids
    assert got == expected, f"{vocab} line {line}: {text!r}"


@pytest.mark.parametrize(
    ("vocab", "text", "ids"),
    [
        ("qwen35", "<think>", [THINK]),
        ("qwen35", "</think>", [THINK + 1]),
        ("qwen35", "<tool_response>", [151665]),
        ("qwen35", "<|im_start|>user", [IM_START, 872]),
        ("qwen35", "<|endoftext|>", [151643]),
        ("qwen2", "<|file_sep|>", [151664]),
        ("qwen2", "<tool_call>", [151657]),
        ("llama-bpe", "<|eot_id|>", [128009]),
        ("llama-bpe", "<|begin_of_text|>", [BEGIN_OF_TEXT]),
    ],
)
def test_added_tokens_have_their_real_ids(vocab: str, text: str, ids: list[int]) -> None:
    assert tokenizer(vocab).encode(text, add_special_tokens=False).ids == ids


def test_qwen25_has_no_thinking_tokens() -> None:
    """Qwen 2.5 predates ``<think>``: it is plain text there, several ids none of them added."""
    ids = tokenizer("qwen2").encode("<think>", add_special_tokens=False).ids
    assert len(ids) > 1 and max(ids) < 151643


@pytest.mark.parametrize("vocab", ["qwen2", "qwen35"])
def test_pad_placeholders_are_not_in_the_hf_vocabulary(vocab: str) -> None:
    tok = tokenizer(vocab)
    assert not [t for t in tok.get_vocab() if t.startswith("[PAD")]
    last = 151664 if vocab == "qwen2" else 151668
    assert tok.get_vocab_size(with_added_tokens=True) == last + 1


def test_qwen2_normalizes_nfc_and_qwen35_does_not() -> None:
    """A decomposed e + U+0301: Qwen2's tokenizer.json normalizes NFC (so it equals the
    precomposed letter), the qwen35 vocabulary does not (llama.cpp never normalizes)."""
    composed, decomposed = "caf\u00e9", "cafe\u0301"
    qwen2, qwen35 = tokenizer("qwen2"), tokenizer("qwen35")
    assert qwen2.encode(decomposed).ids == qwen2.encode(composed).ids
    assert qwen35.encode(decomposed).ids != qwen35.encode(composed).ids


def test_llama3_adds_exactly_one_bos_only_with_special_tokens() -> None:
    tok = tokenizer("llama-bpe")
    plain = tok.encode("Hello world", add_special_tokens=False).ids
    assert tok.encode("Hello world", add_special_tokens=True).ids == [BEGIN_OF_TEXT, *plain]
    spelled = tok.encode("<|begin_of_text|>Hello world", add_special_tokens=True).ids
    assert spelled.count(BEGIN_OF_TEXT) == 2  # the text's own BOS is not deduplicated


@pytest.mark.parametrize("vocab", sorted(VECTOR_COUNTS))
def test_decoding_reverses_encoding(vocab: str) -> None:
    tok = tokenizer(vocab)
    for text, _ in vectors(vocab):
        if vocab == "qwen2" and any(ord(c) in (0x301, 0x300) for c in text):
            continue  # NFC changes the text on the way in
        assert tok.decode(tok.encode(text, add_special_tokens=False).ids) == text
