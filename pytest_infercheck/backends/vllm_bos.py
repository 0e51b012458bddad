"""vLLM's ``add_bos`` (raw prompts): the served tokenizer's BOS put first on ids that lack it.

vLLM's ``add_special_tokens`` (default true on ``/tokenize`` and ``/v1/completions``) adds
what the tokenizer's post-processor adds: nothing for a ``tokenizer.json`` that declares no
BOS (the tiny adder: ``TemplateProcessing`` of ``$A`` alone; transformers reads
``add_bos_token`` False), where mlx-lm's ``add_bos`` and llama.cpp's GGUF ``add_bos_token``
(true when the tokenizer does not say) prepend it. The BOS is the served folder's
``tokenizer_config.json`` ``bos_token``, its id by the server's own ``/tokenize``.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from .base import BackendError

if TYPE_CHECKING:
    from .openai_compat import OpenAICompatBackend

_BOS: weakref.WeakKeyDictionary[OpenAICompatBackend, int] = weakref.WeakKeyDictionary()
"""The BOS id found per backend, asked once."""


def bos_text(backend: str, folder: Path | None, model: str | None) -> str:
    """The ``bos_token`` of ``folder``'s ``tokenizer_config.json`` (a string or
    ``{"content": ...}``). Raises ``BackendError`` when the model is not a local folder or
    names no BOS."""
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text()) if folder else {}
    except (OSError, ValueError):
        config = {}
    token = config.get("bos_token") if isinstance(config, dict) else None
    if isinstance(token, dict):
        token = token.get("content")
    if not isinstance(token, str) or not token:
        raise BackendError(
            f"backend {backend!r}: add_bos: true, but the served model ({model!r}) has no "
            "local tokenizer_config.json naming a bos_token"
        )
    return token


async def with_bos(backend: OpenAICompatBackend, ids: list[int]) -> list[int]:
    """``ids`` with the served tokenizer's BOS first (unchanged when they start with it);
    ``BackendError`` when the BOS is unknown or is not one token on the server."""
    if backend not in _BOS:
        token = bos_text(backend.name, backend.model_folder(), backend.source or backend.model)
        found = await backend.tokenize(token)
        if found is None or len(found) != 1:
            raise BackendError(f"backend {backend.name!r}: add_bos: {token!r} is {found}")
        _BOS[backend] = found[0]
    bos = _BOS[backend]
    return ids if ids[:1] == [bos] else [bos, *ids]
