"""The harness's toy language model: deterministic, tiny, and exact.

A character-level vocabulary (:data:`VOCAB`: four special tokens, then printable ASCII and a
newline; V = 100) and a model whose every distribution is a full row of V log-probabilities:

- the answer a prompt asks for (:meth:`ToyModel.answer`): the sum when the prompt's text ends
  a sum (``12+34=`` -> ``46``; the last ``A+B=`` or ``add A and B`` of the text), else a word
  of 3 to 7 letters drawn from the prompt's ids and the model's ``seed``;
- at position ``t`` of a continuation (:meth:`ToyModel.row`) the answer's ``t``-th token (EOS
  once the answer is over) has logit 9 + noise, every other token its noise in [0, 2) (drawn
  from the prompt ids, the prefix and the seed): greedy decoding reproduces the answer, with
  a margin of at least 7 nats (never a near-tie), and a teacher-forced row of any
  continuation is defined too.

Everything is a pure function of the ids: generation, the teacher-forced score of the same
continuation and the top-k of its rows agree exactly (float32 rows; the chosen logprob of a
generation is its row's entry), which is what a faithful engine does.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from pytest_infercheck.backends.base import GenerationParams

SPECIALS = ("<s>", "</s>", "<tool_call>", "</tool_call>")
BOS, EOS, CALL_OPEN, CALL_CLOSE = 0, 1, 2, 3
VOCAB: tuple[str, ...] = (*SPECIALS, *(chr(c) for c in range(32, 127)), "\n")
V = len(VOCAB)
_ID = {piece: i for i, piece in enumerate(VOCAB)}
UNKNOWN = _ID["?"]
TOP_K = 5
ANSWER_LOGIT = 9.0
NOISE = 2.0
_SUM = re.compile(r"(\d+)\s*\+\s*(\d+)\s*=|add (\d+) and (\d+)")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def tokenize(text: str, *, parse_special: bool = True) -> list[int]:
    """``text``'s ids: a special token's spelling is that token (with ``parse_special``), any
    other character its own id (``?`` for a character outside the vocabulary)."""
    ids: list[int] = []
    i = 0
    while i < len(text):
        if parse_special and text[i] == "<":
            special = next((s for s in SPECIALS if text.startswith(s, i)), None)
            if special is not None:
                ids.append(_ID[special])
                i += len(special)
                continue
        ids.append(_ID.get(text[i], UNKNOWN))
        i += 1
    return ids


def detokenize(ids: Sequence[int]) -> str:
    """The text of ``ids``: each id's piece (special tokens spelled out)."""
    return "".join(VOCAB[i] for i in ids)


def stable_hash(*parts: object) -> int:
    """A hash that is the same in every process (``hash`` of a string is salted)."""
    return zlib.crc32(repr(parts).encode())


class ToyModel:
    """The model (see the module docstring); ``seed`` varies its words and its noise."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def answer(self, prompt_ids: Sequence[int]) -> tuple[int, ...]:
        """The ids the model answers ``prompt_ids`` with (without EOS)."""
        return _answer(self.seed, tuple(prompt_ids))

    def row(self, prompt_ids: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
        """The float32 log-probabilities (V,) of the token after ``prompt_ids + prefix``."""
        return _row(self.seed, tuple(prompt_ids), tuple(prefix))

    def generate(
        self, prompt_ids: Sequence[int], max_tokens: int
    ) -> tuple[list[int], list[np.ndarray], bool]:
        """Greedy decoding: the ids (EOS included when it stopped), their rows, and whether it
        stopped on EOS (else it ran out of ``max_tokens``)."""
        ids: list[int] = []
        rows: list[np.ndarray] = []
        while len(ids) < max_tokens:
            row = self.row(prompt_ids, ids)
            token = int(np.argmax(row))
            ids.append(token)
            rows.append(row)
            if token == EOS:
                return ids, rows, True
        return ids, rows, False

    def sample(
        self,
        prompt_ids: Sequence[int],
        max_tokens: int,
        params: GenerationParams,
        rng: np.random.Generator,
    ) -> tuple[list[int], list[np.ndarray], bool]:
        """Sampled decoding (``params.temperature > 0``) as llama.cpp's chain does it
        (``common/sampling.cpp``): top-k, top-p over the survivors renormalised (kept through
        the first token whose cumulative probability reaches ``top_p``), min-p (``p_i >=
        min_p * p_max``), then the temperature on the survivors' logits and a draw from
        ``rng``. The rows are the raw ones, as :meth:`generate` returns them."""
        ids: list[int] = []
        rows: list[np.ndarray] = []
        while len(ids) < max_tokens:
            row = self.row(prompt_ids, ids)
            token = draw(row.astype(np.float64), params, rng)
            ids.append(token)
            rows.append(row)
            if token == EOS:
                return ids, rows, True
        return ids, rows, False

    def score(self, prompt_ids: Sequence[int], continuation: Sequence[int]) -> np.ndarray:
        """Teacher-forced rows (T, V) of ``continuation`` after ``prompt_ids``."""
        rows = [self.row(prompt_ids, continuation[:t]) for t in range(len(continuation))]
        return np.stack(rows) if rows else np.zeros((0, V), dtype=np.float32)


def draw(row: np.ndarray, params: GenerationParams, rng: np.random.Generator) -> int:
    """One token of the raw logprobs ``row`` under llama.cpp's chain (see
    :meth:`ToyModel.sample`)."""
    order = np.argsort(-row, kind="stable")
    if params.top_k:
        order = order[: params.top_k]
    if params.top_p is not None and params.top_p < 1:
        p = np.exp(row[order] - np.logaddexp.reduce(row[order]))
        reached = np.nonzero(np.cumsum(p) >= params.top_p)[0]
        order = order[: int(reached[0]) + 1] if len(reached) else order
    if params.min_p:
        order = order[row[order] >= row[order[0]] + np.log(params.min_p)]
    logits = row[order] / params.temperature
    p = np.exp(logits - np.logaddexp.reduce(logits))
    return int(order[int(rng.choice(len(order), p=p / p.sum()))])


@lru_cache(maxsize=4096)
def _answer(seed: int, prompt_ids: tuple[int, ...]) -> tuple[int, ...]:
    text = detokenize(prompt_ids)
    sums = list(_SUM.finditer(text))
    if sums:
        a, b = (int(x) for x in sums[-1].groups() if x is not None)
        return tuple(tokenize(str(a + b)))
    h = stable_hash(seed, prompt_ids)
    length = 3 + h % 5
    word = "".join(_LETTERS[(h >> (3 * i + 4)) % 26] for i in range(length))
    return tuple(tokenize(word))


@lru_cache(maxsize=65536)
def _row(seed: int, prompt_ids: tuple[int, ...], prefix: tuple[int, ...]) -> np.ndarray:
    answer = _answer(seed, prompt_ids)
    t = len(prefix)
    target = answer[t] if t < len(answer) else EOS
    rng = np.random.default_rng(stable_hash(seed, prompt_ids, prefix))
    logits = rng.random(V) * NOISE
    logits[target] += ANSWER_LOGIT
    logits -= logits.max()
    row = logits - np.log(np.exp(logits).sum())
    out = row.astype(np.float32)
    out.setflags(write=False)
    return out


def top_k(row: np.ndarray, k: int = TOP_K) -> dict[int, float]:
    """The ``k`` most likely ids of ``row`` with their logprobs, most likely first."""
    order = np.argsort(-row, kind="stable")[:k]
    return {int(i): float(row[i]) for i in order}
