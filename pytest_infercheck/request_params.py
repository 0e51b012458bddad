"""Request parameters as a check entry writes them (``{temperature: 1.0, top_p: 0.9}``), and
the collection error of a parameter the target's engine does not take.

:class:`RequestParams` is the YAML model (strict: a misspelt parameter is an error at its
line); :meth:`RequestParams.generation_params` makes the :class:`~.backends.base.
GenerationParams` a backend sends. :func:`refused_params` says, from the matrix alone, which
written parameters the target's backend kind does not take (:mod:`.backends.params`), each
at its YAML location, so a check that asks ``min_tokens`` of llama-server fails collection at
that line instead of sending a field the engine ignores.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from .backends.base import GenerationParams
from .backends.params import refusal
from .strict import Strict

if TYPE_CHECKING:
    from .matrix import LoadedMatrix, Target
    from .specs import Loc


class RequestParams(Strict):
    """One set of request parameters (every key optional; ``temperature`` 0 is greedy).

    ``top_p``, ``top_k``, ``min_p`` truncate the distribution; ``presence_penalty``,
    ``frequency_penalty``, ``repetition_penalty`` and ``logit_bias`` (token id -> bias) shift
    logits; ``stop`` (a string or a list), ``n`` (choices per request), ``min_tokens``,
    ``ignore_eos``, ``include_stop`` (keep the stop string), ``logprobs`` (top logprobs per
    token) and ``seed`` are sent as each engine names them."""

    temperature: float | None = Field(default=None, ge=0)
    """Sampling temperature (0: greedy)."""
    top_p: float | None = Field(default=None, gt=0, le=1)
    """Nucleus sampling: keep the most likely tokens whose probabilities sum to this (0 < p <=
    1)."""
    top_k: int | None = Field(default=None, ge=1)
    """Keep only the k most likely tokens."""
    min_p: float | None = Field(default=None, ge=0, le=1)
    """Keep the tokens at least this share of the most likely one's probability (0 to 1)."""
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    """Subtracted from the logit of every token already generated (-2 to 2)."""
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    """Subtracted from a token's logit per time it was generated (-2 to 2)."""
    repetition_penalty: float | None = Field(default=None, gt=0)
    """Divides the logits of tokens already seen (> 0; 1: none)."""
    logit_bias: dict[int, float] | None = None
    """Token id -> a bias added to its logit."""
    stop: list[str] | None = None
    """A stop string, or a list of them."""
    n: int | None = Field(default=None, ge=1)
    """Choices per request."""
    min_tokens: int | None = Field(default=None, ge=0)
    """Tokens generated before an end of sequence is allowed."""
    ignore_eos: bool | None = None
    """Generate past the end-of-sequence token."""
    include_stop: bool | None = None
    """Keep the stop string in the output."""
    logprobs: int | None = Field(default=None, ge=0)
    """Top logprobs returned per token."""
    seed: int | None = None
    """The sampling seed of the request."""
    max_tokens: int | None = Field(default=None, ge=0)
    """Tokens generated at most."""

    @field_validator("stop", mode="before")
    @classmethod
    def _one_stop(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def written(self) -> list[str]:
        """The parameters written, in declaration order."""
        return [k for k in type(self).model_fields if getattr(self, k) is not None]

    def generation_params(self, max_tokens: int, seed: int | None = None) -> GenerationParams:
        """These parameters over ``max_tokens`` (replaced by a written ``max_tokens``) and
        ``seed`` (replaced by a written one); unwritten ones are the greedy defaults."""
        return GenerationParams(
            max_tokens=self.max_tokens if self.max_tokens is not None else max_tokens,
            temperature=self.temperature or 0.0,
            seed=self.seed if self.seed is not None else seed,
            top_p=self.top_p,
            top_k=self.top_k,
            min_p=self.min_p,
            presence_penalty=self.presence_penalty,
            frequency_penalty=self.frequency_penalty,
            repetition_penalty=self.repetition_penalty,
            logit_bias=tuple((self.logit_bias or {}).items()),
            stop=tuple(self.stop or ()),
            n=self.n or 1,
            min_tokens=self.min_tokens,
            ignore_eos=bool(self.ignore_eos),
            logprobs=self.logprobs,
            include_stop=bool(self.include_stop),
        )

    def label(self) -> str:
        """A short name for node ids: ``t1.0-p0.9`` (each written parameter, abbreviated,
        with its value; ``greedy`` when none is written)."""
        parts = []
        for key in self.written():
            value = getattr(self, key)
            short = ABBREVIATIONS.get(key, key)
            if isinstance(value, dict):
                value = "+".join(f"{t}:{b:g}" for t, b in value.items())
            elif isinstance(value, list):
                value = "+".join(v.encode("unicode_escape").decode() for v in value)
            elif isinstance(value, bool):
                value = "" if value else "off"
            elif isinstance(value, float):
                value = f"{value:g}"
            parts.append(f"{short}{value}")
        return "-".join(parts) or "greedy"


ABBREVIATIONS = {
    "temperature": "t",
    "top_p": "p",
    "top_k": "k",
    "min_p": "minp",
    "presence_penalty": "pres",
    "frequency_penalty": "freq",
    "repetition_penalty": "rep",
    "logit_bias": "bias",
    "stop": "stop",
    "min_tokens": "min",
    "ignore_eos": "ignore_eos",
    "include_stop": "include_stop",
    "logprobs": "lp",
    "max_tokens": "max",
}


def target_backend(loaded: LoadedMatrix, target: Target) -> tuple[str, bool | None]:
    """The backend kind of ``target`` and its ``chat:`` (None: the kind's default)."""
    spec = loaded.matrix.backends[target.backend]
    return str(spec.kind), getattr(spec, "chat", None)


def refused_params(
    loaded: LoadedMatrix, target: Target, asked: Iterable[tuple[Loc, Iterable[str]]]
) -> list[tuple[Loc, str]]:
    """Each parameter in ``asked`` (its YAML location and the names written there) that the
    backend of ``target`` does not take, with why (:func:`~.backends.params.refusal`)."""
    kind, chat = target_backend(loaded, target)
    out = []
    for loc, names in asked:
        for name in names:
            if name in EVERY_BACKEND:
                continue
            why = refusal(target.backend, kind, chat, name)
            if why is not None:
                out.append(((*loc, name), why))
    return out


EVERY_BACKEND = frozenset({"temperature", "max_tokens"})
"""Parameters every backend sends."""
