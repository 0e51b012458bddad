"""The vocabulary fingerprint kept between runs (``backends/vocab_fingerprint.py``): the same
value as the formula, computed once per content of the tokenizer files, never read back for
another content (even one with the same size and time), and the value of ``load_model`` on a
real tokenizer, cold and warm, equal to the formula on its vocabulary."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import vocab_fingerprint as vf


class Counting:
    """A tokenizer whose ``get_vocab`` calls are counted."""

    def __init__(self, vocab: dict[str, int]) -> None:
        self.vocab = vocab
        self.calls = 0

    def get_vocab(self) -> dict[str, int]:
        self.calls += 1
        return dict(self.vocab)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "cache"
    monkeypatch.setenv("INFERCHECK_CACHE", str(where))
    return where


def test_the_formula_by_hand() -> None:
    # sha256(b'[["a", 0], ["b", 1], ["\\u00e9", 2]]'), its first 16 hex digits
    assert vf.fingerprint_of({"b": 1, "a": 0, "\u00e9": 2}) == "feca0501a95b9c74"


def test_computed_once_per_content_then_read(tmp_path: Path, cache: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text('{"v": 1}')
    (folder / "model.safetensors").write_bytes(b"weights")
    first = Counting({"b": 1, "a": 0, "\u00e9": 2})
    assert vf.vocabulary_fingerprint(first, folder) == "feca0501a95b9c74"
    assert first.calls == 1
    again = Counting({"b": 1, "a": 0, "\u00e9": 2})
    assert vf.vocabulary_fingerprint(again, folder) == "feca0501a95b9c74"
    assert again.calls == 0  # read back, not computed
    assert len(list((cache / "fingerprints").iterdir())) == 1
    # the weights are not a tokenizer file: changing them keeps the key
    (folder / "model.safetensors").write_bytes(b"other weights")
    assert vf.vocabulary_fingerprint(Counting({}), folder) == "feca0501a95b9c74"


def test_another_content_with_the_same_size_and_time_is_another_key(
    tmp_path: Path, cache: Path
) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    tokenizer = folder / "tokenizer.json"
    tokenizer.write_text('{"v": 1}')
    stat = tokenizer.stat()
    assert vf.vocabulary_fingerprint(Counting({"a": 0}), folder) == vf.fingerprint_of({"a": 0})
    tokenizer.write_text('{"v": 2}')  # same size
    os.utime(tokenizer, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same time
    changed = Counting({"a": 1})
    assert vf.vocabulary_fingerprint(changed, folder) == vf.fingerprint_of({"a": 1})
    assert changed.calls == 1
    # a tokenizer file added (an added_tokens.json) is another key too
    (folder / "added_tokens.json").write_text('{"x": 2}')
    added = Counting({"a": 1, "x": 2})
    assert vf.vocabulary_fingerprint(added, folder) == vf.fingerprint_of({"a": 1, "x": 2})
    assert added.calls == 1


def test_a_hub_name_or_an_unwritable_cache_computes(tmp_path: Path, cache: Path) -> None:
    hub = Counting({"a": 0})
    assert vf.vocabulary_fingerprint(hub, "org/model") == vf.fingerprint_of({"a": 0})
    assert vf.vocabulary_fingerprint(hub, "org/model") == vf.fingerprint_of({"a": 0})
    assert hub.calls == 2  # nothing kept for a folder that is not here
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    cache.write_text("a file where the cache folder should be")
    blocked = Counting({"a": 0})
    assert vf.vocabulary_fingerprint(blocked, folder) == vf.fingerprint_of({"a": 0})
    assert vf.vocabulary_fingerprint(blocked, folder) == vf.fingerprint_of({"a": 0})
    assert blocked.calls == 2


def test_a_corrupt_entry_is_computed_again(tmp_path: Path, cache: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    key = vf.folder_key(folder)
    assert key is not None
    (cache / "fingerprints").mkdir(parents=True)
    (cache / "fingerprints" / key).write_text("not a fingerprint")
    tokenizer = Counting({"a": 0})
    assert vf.vocabulary_fingerprint(tokenizer, folder) == vf.fingerprint_of({"a": 0})
    assert tokenizer.calls == 1


def test_load_model_cold_and_warm_equal_the_formula(
    tiny_models: dict[str, Path], cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pytest_infercheck.backends import mlx_load

    spec = mlx_load.MlxModelSpec(str(tiny_models["bf16"]))
    monkeypatch.setattr(mlx_load, "_LOADED", {})
    cold = mlx_load.load_model(spec)
    expected = vf.fingerprint_of(cold.tokenizer.get_vocab())
    assert cold.fingerprint == expected
    assert len(list((cache / "fingerprints").iterdir())) == 1
    monkeypatch.setattr(mlx_load, "_LOADED", {})
    calls: list[Any] = []
    monkeypatch.setattr(vf, "fingerprint_of", lambda vocab: calls.append(vocab) or "computed")
    warm = mlx_load.load_model(spec)
    assert (warm.fingerprint, calls) == (expected, [])
