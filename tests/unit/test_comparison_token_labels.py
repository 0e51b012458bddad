"""The KL chart's token labels where the engine returns ids only (mlx-lm in-process): the
backend's own pieces of the generated ids, a label only (never compared)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.comparison.gather_prompt import token_labels


class _Backend:
    def __init__(self, pieces: dict[int, str] | None) -> None:
        self.pieces = pieces
        self.asked: list[list[int]] = []

    async def token_pieces(self, ids: Sequence[int]) -> list[str] | None:
        self.asked.append(list(ids))
        return None if self.pieces is None else [self.pieces[i] for i in ids]


class _Target:
    def __init__(self, backend: _Backend) -> None:
        self.backend = backend


class _Cache:
    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)


def test_ids_only_are_labelled_by_the_backends_pieces() -> None:
    backend = _Backend({7: "6", 3: "9", 2: "</s>"})
    generation = Generation(text="69", token_ids=[7, 3, 2], finish_reason="stop")
    labels = token_labels(_Cache(), _Target(backend), generation)  # type: ignore[arg-type]
    assert labels == ["6", "9", "</s>"]
    assert backend.asked == [[7, 3, 2]]


def test_an_engine_with_token_texts_or_no_ids_or_no_pieces_gets_none() -> None:
    backend = _Backend({1: "x"})
    texts = Generation(text="x", token_ids=[1], finish_reason="stop", token_texts=["x"])
    assert token_labels(_Cache(), _Target(backend), texts) is None  # type: ignore[arg-type]
    no_ids = Generation(text="x", token_ids=None, finish_reason="stop")
    assert token_labels(_Cache(), _Target(backend), no_ids) is None  # type: ignore[arg-type]
    assert backend.asked == []
    silent = _Backend(None)
    ids = Generation(text="x", token_ids=[1], finish_reason="stop")
    assert token_labels(_Cache(), _Target(silent), ids) is None  # type: ignore[arg-type]
