"""The generated suite ``context-ladder`` (pytest_infercheck/context_ladder.py), with a word
tokenizer whose counts are known by hand: the original context from config.json, the
deterministic prose, each bucket's length in tokens and its metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_infercheck import context_ladder as cl
from pytest_infercheck.suite_spec import SuiteError


def encode(text: str) -> list[int]:
    """One token per word (ids by hash are not needed: counts only)."""
    return [len(w) for w in text.split()]


class Words:
    """A word tokenizer that can decode its own ids back (ids index a word list)."""

    def __init__(self) -> None:
        self.words: list[str] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self.words:
                self.words.append(w)
            out.append(self.words.index(w))
        return out

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.words[i] for i in ids)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"max_position_embeddings": 128}, 128),
        (
            {
                "max_position_embeddings": 1024,
                "rope_scaling": {"rope_type": "yarn", "original_max_position_embeddings": 128},
            },
            128,
        ),
        ({"max_position_embeddings": 128, "rope_scaling": {"rope_type": "linear"}}, 128),
        (
            {
                "max_position_embeddings": 8,
                "rope_parameters": {"original_max_position_embeddings": 4},
            },
            4,
        ),
    ],
)
def test_original_context(config: dict, expected: int) -> None:
    assert cl.original_context(config) == expected


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        # Gemma 3 style: a window shorter than the context anchors the ladder.
        ({"max_position_embeddings": 1024, "sliding_window": 128}, 128),
        (
            {
                "max_position_embeddings": 1024,
                "sliding_window": 128,
                "layer_types": ["sliding_attention", "full_attention"],
            },
            128,
        ),
        # A window longer than the context, or one not in effect, does not.
        ({"max_position_embeddings": 128, "sliding_window": 4096}, 128),
        (
            {"max_position_embeddings": 1024, "sliding_window": 128, "use_sliding_window": False},
            1024,
        ),
        (
            {
                "max_position_embeddings": 1024,
                "sliding_window": 128,
                "layer_types": ["full_attention", "full_attention"],
            },
            1024,
        ),
        ({"max_position_embeddings": 1024, "sliding_window": None}, 1024),
        ({"max_position_embeddings": 1024, "sliding_window": True}, 1024),
        (
            {
                "max_position_embeddings": 4096,
                "sliding_window": 256,
                "rope_scaling": {"original_max_position_embeddings": 512},
            },
            256,
        ),
    ],
)
def test_ladder_context(config: dict, expected: int) -> None:
    assert cl.ladder_context(config) == expected


def test_ladder_suite_of_a_sliding_window_model(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    # One token per word (the prose's other words are [UNK], one token each too).
    words = {"[UNK]": 0, **{w: i + 1 for i, w in enumerate(cl._WORDS)}}
    tok = Tokenizer(models.WordLevel(words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(tmp_path / "tokenizer.json"))
    config = {"max_position_embeddings": 1024, "sliding_window": 20}
    (tmp_path / "config.json").write_text(json.dumps(config))
    suite = cl.ladder_suite(tmp_path)
    # No chat template: the text is counted; 0.5x, 1x, 2x, 4x of the window of 20.
    assert [p.meta["tokens"] for p in suite.prompts] == [10, 20, 40, 80]
    assert {p.meta["original_context"] for p in suite.prompts} == {20}


def test_original_context_missing() -> None:
    with pytest.raises(ValueError, match="no original context length"):
        cl.original_context({"hidden_size": 64})


def test_prose_is_deterministic_and_numbered() -> None:
    # x1 = (1103515245 * 1 + 12345) mod 2^31 = 1103527590; (x1 >> 16) % 30 = 16838 % 30 = 8
    # -> _WORDS[8] = "copper" (the 9th word).
    text = cl.prose(1, 20)
    assert text == cl.prose(1, 20)
    assert text != cl.prose(2, 20)
    words = text.split()
    assert len(words) == 20
    assert words[:5] == ["Passage", "1.", "Note", "1:", "copper"]
    assert words[12:14] == ["Note", "2:"]  # 2 + 8 words per sentence


def test_buckets_hit_their_lengths_with_the_template_overhead() -> None:
    tok = Words()
    overhead = 5  # a template of 5 tokens around the text

    def rendered(text: str) -> int:
        return overhead + len(tok.encode(text))

    prompts = cl.ladder_prompts(16, tok.encode, tok.decode, rendered, per_bucket=2)
    assert [p.id for p in prompts] == [
        f"len-{b}-{k}" for b in ("0.5x", "1x", "2x", "4x") for k in range(2)
    ]
    # 0.5x of 16 = 8 tokens rendered = 3 of text; 1x 16 = 11; 2x 32 = 27; 4x 64 = 59.
    assert [p.meta["tokens"] for p in prompts] == [8, 8, 16, 16, 32, 32, 64, 64]
    assert [p.meta["text_tokens"] for p in prompts] == [3, 3, 11, 11, 27, 27, 59, 59]
    assert [len(p.text.split()) for p in prompts] == [3, 3, 11, 11, 27, 27, 59, 59]
    first = prompts[6]
    assert first.bucket == "4x"
    assert first.max_tokens == cl.MAX_TOKENS
    assert first.meta == {
        "bucket": "4x",
        "multiple": 4.0,
        "original_context": 16,
        "tokens": 64,
        "text_tokens": 59,
        "counted": "rendered",
    }
    assert prompts[0].text != prompts[1].text  # two prose seeds per bucket


def test_text_counted_without_a_renderer() -> None:
    tok = Words()
    prompts = cl.ladder_prompts(10, tok.encode, tok.decode, None, multiples=(0.5, 4.0))
    assert [p.meta["tokens"] for p in prompts] == [5, 40]
    assert {p.meta["counted"] for p in prompts} == {"text"}


def test_template_longer_than_a_bucket_is_an_error() -> None:
    tok = Words()
    with pytest.raises(ValueError, match=r"0.5x prompt would be 4 tokens, but the chat template"):
        cl.ladder_prompts(8, tok.encode, tok.decode, lambda t: 6 + len(tok.encode(t)))


def test_suite_from_a_folder_and_its_errors(tmp_path: Path) -> None:
    with pytest.raises(SuiteError, match=r"config\.json"):
        cl.ladder_suite(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 4}))
    with pytest.raises(SuiteError, match="no original context length"):
        cl.ladder_suite(tmp_path)
    assert cl.ladder_model_dir([None, str(tmp_path / "nothing"), str(tmp_path)]) == tmp_path
    assert cl.ladder_model_dir([None]) is None
