"""Which request parameters each backend kind's engine takes, and how they are sent.

Plain data and pure functions (no backend module imported): the matrix refuses a parameter a
check asks of a target whose engine does not take it, at the line that asks (:func:`refusal`),
and the backends build their request fields from :class:`~.base.GenerationParams` with the
helpers below. Every engine's list is what its documentation or request model declares, read
in the version this project runs:

- ``mlx-lm`` (0.32.2, in-process): ``mlx_lm.sample_utils.make_sampler(temp, top_p, min_p,
  top_k)`` and ``make_logits_processors(logit_bias, repetition_penalty, presence_penalty,
  frequency_penalty)``, ``mx.random.seed``; no stop strings, ``n``, ``min_tokens`` or
  ``ignore_eos`` (mlx-lm's ``generate_step`` has none: the loop that stops at EOS is ours);
  top logprobs from its full rows.
- ``llama-server`` (llama.cpp of llama-cpp-python 0.3.36, ``tools/server/server-schema.cpp``):
  ``top_k``, ``top_p``, ``min_p``, ``repeat_penalty``, ``presence_penalty``,
  ``frequency_penalty``, ``logit_bias``, ``stop``, ``n_cmpl`` (alias ``n``, at most the
  server's ``-np`` slots), ``ignore_eos``, ``n_probs``, ``seed``; no ``min_tokens``.
- ``vllm`` (0.32, ``vllm/sampling_params.py``): every parameter here, ``min_tokens``,
  ``ignore_eos`` and ``include_stop_str_in_output`` included.
- ``vllm-mlx`` (0.6.0, ``vllm_mlx/api/models.py``): ``top_p``, ``top_k``, ``min_p``,
  ``presence_penalty``, ``repetition_penalty``, ``stop``, and ``logit_bias`` on the chat
  request only; unknown fields are ignored silently (``frequency_penalty``, ``n``, ``seed``,
  logprobs), so they are refused here.
- ``openai`` (any OpenAI-compatible server): the OpenAI API's fields (``top_p``,
  ``presence_penalty``, ``frequency_penalty``, ``logit_bias``, ``stop``, ``n``, ``seed``,
  ``logprobs``) and the extensions vLLM, SGLang, llama.cpp and mlx_lm.server (0.32.2,
  ``mlx_lm/server.py``) all document (``top_k``, ``min_p``, ``repetition_penalty``);
  mlx_lm.server ignores ``n``, which the request-conformance check shows.
- ``sglang`` (``docs/basic_usage/sampling_params.md``): ``sampling_params`` with
  ``top_p``, ``top_k``, ``min_p``, the three penalties, ``stop``, ``n``,
  ``min_new_tokens``, ``ignore_eos``, ``logit_bias``, ``sampling_seed``; ``top_logprobs_num``.
- ``ollama`` (``docs/api.md``, ``options``): ``top_k``, ``top_p``, ``min_p``,
  ``repeat_penalty``, ``presence_penalty``, ``frequency_penalty``, ``stop``, ``seed``,
  ``top_logprobs``; no ``logit_bias``, ``n``, ``min_tokens``, ``ignore_eos``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .base import GenerationParams

SAMPLING = ("top_p", "top_k", "min_p")
PENALTIES = ("presence_penalty", "frequency_penalty", "repetition_penalty")
PARAM_NAMES = (
    "seed",
    *SAMPLING,
    *PENALTIES,
    "logit_bias",
    "stop",
    "n",
    "min_tokens",
    "ignore_eos",
    "logprobs",
    "include_stop",
)
"""Every request parameter beyond ``max_tokens`` and ``temperature``, as the YAML names
them (the fields of :class:`~.base.GenerationParams`)."""

_ALL = frozenset(PARAM_NAMES)
_OPENAI_API = frozenset(
    {"seed", "top_p", "presence_penalty", "frequency_penalty", "logit_bias", "stop", "n"}
    | {"logprobs", "top_k", "min_p", "repetition_penalty"}
)
TAKEN: dict[str, frozenset[str]] = {
    "mlx-lm": frozenset({"seed", *SAMPLING, *PENALTIES, "logit_bias", "logprobs"}),
    "llama-server": _ALL - {"min_tokens", "include_stop"},
    "vllm": _ALL,
    "vllm-mlx": frozenset({*SAMPLING, "presence_penalty", "repetition_penalty", "stop"}),
    "openai": _OPENAI_API,
    "sglang": _ALL - {"include_stop"},
    "ollama": frozenset({"seed", *SAMPLING, *PENALTIES, "stop", "logprobs"}),
}
"""The parameters each backend kind's engine takes (see the module docstring)."""

CHAT_ONLY: dict[str, frozenset[str]] = {"vllm-mlx": frozenset({"logit_bias"})}
"""Parameters a kind takes on its chat endpoint only (``chat: true``, the default)."""

NEUTRAL: dict[str, Any] = {
    "top_p": 1.0,
    "top_k": 0,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
}
"""The value of each truncation and penalty that applies nothing: sent for the ones a
sampled request leaves unset (an engine's own default, or a model's ``generation_config``
that vLLM and SGLang apply by default, would apply them otherwise)."""


def taken(kind: str, chat: bool | None = None) -> frozenset[str]:
    """The parameters a ``kind`` backend takes (``chat``: its ``chat:``; None: the kind's
    default, chat for the OpenAI-style kinds)."""
    names = TAKEN.get(kind, frozenset())
    return names if chat is False else names | CHAT_ONLY.get(kind, frozenset())


def takers(name: str) -> list[str]:
    """The backend kinds that take parameter ``name``."""
    return [kind for kind in TAKEN if name in taken(kind)]


def refusal(backend: str, kind: str, chat: bool | None, name: str) -> str | None:
    """Why the backend ``backend`` of ``kind`` cannot be asked ``name`` (None: it takes it):
    ``backend 'llama' (llama-server) does not take min_tokens (taken by vllm, sglang)``."""
    if name in taken(kind, chat):
        return None
    where = " on /v1/completions (chat: false)" if name in CHAT_ONLY.get(kind, ()) else ""
    others = ", ".join(takers(name)) or "no backend kind"
    return f"backend {backend!r} ({kind}) does not take {name}{where} (taken by {others})"


def check_taken(backend: str, kind: str, chat: bool | None, params: GenerationParams) -> None:
    """Raise ``BackendError`` naming the first parameter of ``params`` that a ``kind``
    backend does not take (:func:`refusal`): an engine that would not apply it is never
    sent it silently."""
    from .base import BackendError

    for name in params.asked():
        why = refusal(backend, kind, chat, name)
        if why is not None:
            raise BackendError(why)


def neutral_for(params: GenerationParams, names: frozenset[str]) -> dict[str, Any]:
    """The neutral value of each truncation and penalty among ``names`` that a sampled
    ``params`` leaves unset (nothing for a greedy one: its request stays as it was)."""
    if not params.sampled:
        return {}
    return {k: v for k, v in NEUTRAL.items() if k in names and getattr(params, k) is None}


def openai_fields(params: GenerationParams, names: frozenset[str]) -> dict[str, Any]:
    """The request fields of ``params`` beyond ``max_tokens``, ``temperature`` and ``seed``
    in the OpenAI style (``logit_bias`` keyed by the id as text, vLLM's ``min_tokens``,
    ``ignore_eos`` and ``include_stop_str_in_output``), only those written, plus the neutral
    values of :func:`neutral_for`; ``logprobs`` is the caller's (its shape is negotiated)."""
    fields: dict[str, Any] = neutral_for(params, names)
    for name in (*SAMPLING, *PENALTIES, "min_tokens"):
        value = getattr(params, name)
        if value is not None:
            fields[name] = value
    if params.logit_bias:
        fields["logit_bias"] = {str(t): b for t, b in params.logit_bias}
    if params.stop:
        fields["stop"] = list(params.stop)
    if params.n != 1:
        fields["n"] = params.n
    if params.ignore_eos:
        fields["ignore_eos"] = True
    if params.include_stop:
        fields["include_stop_str_in_output"] = True
    return fields


def llama_fields(params: GenerationParams) -> dict[str, Any]:
    """``params`` as llama-server's native ``/completion`` fields: ``repeat_penalty``,
    ``logit_bias`` as ``[[id, bias], ...]``, ``n_cmpl``; the neutral values of
    :func:`neutral_for` for a sampled request (llama.cpp's defaults are ``top_k`` 40,
    ``top_p`` 0.95, ``min_p`` 0.05, ``common/common.h``)."""
    fields: dict[str, Any] = {}
    for name, value in neutral_for(params, TAKEN["llama-server"]).items():
        fields["repeat_penalty" if name == "repetition_penalty" else name] = value
    for name in (*SAMPLING, *PENALTIES):
        value = getattr(params, name)
        if value is not None:
            fields["repeat_penalty" if name == "repetition_penalty" else name] = value
    if params.logit_bias:
        fields["logit_bias"] = [[t, b] for t, b in params.logit_bias]
    if params.stop:
        fields["stop"] = list(params.stop)
    if params.n != 1:
        fields["n_cmpl"] = params.n
    if params.ignore_eos:
        fields["ignore_eos"] = True
    return fields
