"""The realistic models' Hugging Face tokenizers (examples/models/make_realistic.py) against
llama.cpp's own tokenizer test vectors, one case per vector line, and the properties the
vectors do not show: added tokens at their real ids (Llama 3.1's special tokens for the
llama-bpe vocabulary, every one its chat template spells one id), NFC, BOS. (The GGUF's token
types are checked in tests/integration/test_realistic_models.py: reading a 152k-token GGUF
takes seconds.)"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from conftest import load_example
from pytest_infercheck.tools import Tool

SEPARATOR = "\n__ggml_vocab_test__\n"
VECTOR_COUNTS = {"qwen2": 46, "qwen35": 50, "llama-bpe": 46}
"""Lines of ``ggml-vocab-<vocab>.gguf.inp``/``.out`` in llama-cpp-python 0.3.36."""

THINK = 151667
IM_START = 151644
BEGIN_OF_TEXT = 128000

LLAMA31_SPECIAL = {
    "<|begin_of_text|>": 128000,
    "<|end_of_text|>": 128001,
    "<|reserved_special_token_0|>": 128002,
    "<|reserved_special_token_1|>": 128003,
    "<|finetune_right_pad_id|>": 128004,
    "<|reserved_special_token_2|>": 128005,
    "<|start_header_id|>": 128006,
    "<|end_header_id|>": 128007,
    "<|eom_id|>": 128008,
    "<|eot_id|>": 128009,
    "<|python_tag|>": 128010,
    "<|reserved_special_token_3|>": 128011,
    "<|reserved_special_token_247|>": 128255,
}
"""Llama 3.1's special tokens at their ids, written out here independently of the maker's data
file: transformers' ``convert_llama_weights_to_hf.py`` ``DEFAULT_LLAMA_SPECIAL_TOKENS["3.1"]``
(ids 128000-128010 named, then ``<|reserved_special_token_3|>`` ... ``_247|>`` to 128255), as
a Llama-3.1-8B ``tokenizer_config.json`` ``added_tokens_decoder`` has them. Llama 3 (the vocab
GGUF) names 128004, 128005, 128008 and 128010-128255 otherwise."""
LLAMA31_END_IDS = [128001, 128008, 128009]
"""Llama 3.1 Instruct's ``eos_token_id`` (config.json and generation_config.json)."""
LLAMA_TEMPLATE = "meta-llama-Llama-3.1-8B-Instruct"
SPECIAL_SPELLING = re.compile(r"<\|[a-z_0-9]+\|>")
ADD = Tool(
    "add",
    {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
        "required": ["a", "b"],
    },
    "Add two integers.",
)
BUILTIN_TOOLS = ["brave_search", "wolfram_alpha"]
"""Llama 3.1's built-in tools: with them the template ends a call with ``<|eom_id|>`` and
writes a built-in call after ``<|python_tag|>``."""


def tool_conversation() -> list[dict[str, Any]]:
    """A Llama 3.1 tool conversation: a custom tool call (``add``) and its result, a plain
    answer, a built-in tool call (``brave_search``) and its result; rendered with
    ``tools=[ADD]``, ``builtin_tools=BUILTIN_TOOLS`` and the generation prompt it spells every
    special token the template uses."""

    def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return {"type": "function", "function": {"name": name, "arguments": arguments}}

    return [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "add 12 and 34"},
        {"role": "assistant", "tool_calls": [call("add", {"a": 12, "b": 34})]},
        {"role": "tool", "name": "add", "content": '{"result": 46}'},
        {"role": "assistant", "content": "The sum is 46."},
        {"role": "user", "content": "news about Oslo?"},
        {"role": "assistant", "tool_calls": [call("brave_search", {"query": "Oslo"})]},
        {"role": "ipython", "content": '{"results": []}'},
    ]


def render_tool_conversation(hf: Any) -> str:
    """:func:`tool_conversation` through ``hf.apply_chat_template`` (a transformers tokenizer
    or mlx-lm's wrapper of one), with the generation prompt."""
    text = hf.apply_chat_template(
        tool_conversation(),
        tools=[ADD.openai()],
        builtin_tools=BUILTIN_TOOLS,
        add_generation_prompt=True,
        tokenize=False,
    )
    assert isinstance(text, str)
    return text


def expected_special_ids(text: str) -> list[int]:
    """The ids of the special tokens ``text`` spells, in order, by :data:`LLAMA31_SPECIAL`."""
    return [LLAMA31_SPECIAL[m] for m in SPECIAL_SPELLING.findall(text)]


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


# --------------------------------------------------------------------------- Llama 3.1


def llama_hf_files(folder: Path) -> Any:
    """The llama-bpe tokenizer as the model folder carries it (``tokenizer.json`` and the
    maker's ``tokenizer_config.json``: added tokens, BOS/EOS, the Llama 3.1 template), loaded
    by transformers as mlx-lm and vLLM load it."""
    from transformers import AutoTokenizer

    m = maker()
    tok = tokenizer("llama-bpe")
    tok.save(str(folder / "tokenizer.json"))
    config = m._tokenizer_config("llama-bpe", m.template_text(LLAMA_TEMPLATE), m._added_tokens(tok))
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return AutoTokenizer.from_pretrained(str(folder))


@pytest.mark.parametrize(("content", "token_id"), sorted(LLAMA31_SPECIAL.items()))
def test_llama31_special_tokens_are_one_special_id_each(content: str, token_id: int) -> None:
    tok = tokenizer("llama-bpe")
    assert tok.encode(content, add_special_tokens=False).ids == [token_id]
    assert tok.id_to_token(token_id) == content
    assert tok.get_added_tokens_decoder()[token_id].special


def test_llama31_has_256_special_tokens_and_none_of_llama3s_other_names() -> None:
    """128000-128255 are all special; Llama 3's names for the renamed ids (``_4|>`` was
    128008, ``_248|>`` ... ``_250|>`` the last ids) are gone, not added elsewhere."""
    tok = tokenizer("llama-bpe")
    added = tok.get_added_tokens_decoder()
    assert sorted(added) == list(range(128000, 128256))
    assert all(t.special for t in added.values())
    names = {t.content for t in added.values()}
    assert len(names) == 256
    assert {f"<|reserved_special_token_{n}|>" for n in range(248)} <= names
    assert not {f"<|reserved_special_token_{n}|>" for n in (248, 249, 250)} & names


def test_every_special_token_of_the_llama31_template_is_one_id_at_its_real_id(
    tmp_path: Path,
) -> None:
    """The Llama 3.1 template rendered (transformers, from the model folder's tokenizer files)
    on a conversation with a custom and a built-in tool call and their results: it spells
    every special token the template source names (and the BOS), and its ids hold exactly
    those tokens, each as one id at Llama 3.1's id, in order; the text round-trips."""
    hf = llama_hf_files(tmp_path)
    text = render_tool_conversation(hf)
    template = maker().template_text(LLAMA_TEMPLATE)
    used = set(SPECIAL_SPELLING.findall(template)) | {"<|begin_of_text|>"}
    assert used == {
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    }
    assert set(SPECIAL_SPELLING.findall(text)) == used
    ids = hf(text, add_special_tokens=False).input_ids
    assert [i for i in ids if i >= BEGIN_OF_TEXT] == expected_special_ids(text)
    assert hf.decode(ids) == text
    assert "<|python_tag|>brave_search.call(" in text and '"parameters": {"a": 12' in text


def test_llama31_model_files_name_its_end_ids(tmp_path: Path) -> None:
    """BOS, EOS and the end ids the maker writes: the tokenizer's EOS is ``<|eot_id|>``, the
    config's end ids Llama 3.1 Instruct's three (llama.cpp ends on those by spelling)."""
    m = maker()
    hf = llama_hf_files(tmp_path)
    assert (hf.bos_token_id, hf.eos_token_id) == (BEGIN_OF_TEXT, 128009)
    assert m.eos_ids("llama-bpe", 128009) == LLAMA31_END_IDS
    assert m.eos_ids("qwen2", 151645) == [151645]
    config = m.model_config("llama-bpe", 128256, BEGIN_OF_TEXT, LLAMA31_END_IDS)
    assert config["eos_token_id"] == LLAMA31_END_IDS
