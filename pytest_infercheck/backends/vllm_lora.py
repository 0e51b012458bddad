"""Which ``model`` asks a vLLM server for a LoRA adapter (``--lora-modules NAME=PATH``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .base import BackendError


def lora_module(served: Sequence[Mapping[str, Any]], adapter: str, name: str) -> str:
    """The ``model`` that asks vLLM for ``adapter``: the id of the ``/v1/models`` entry
    with a ``parent`` (a LoRA module, ``--lora-modules NAME=PATH``) whose ``root`` is the
    adapter's folder. Raises a :class:`BackendError` when the server serves no such module
    (a request naming the base model would answer without the adapter, silently)."""
    want = os.path.realpath(adapter)
    for entry in served:
        root = entry.get("root")
        if entry.get("parent") and isinstance(root, str) and os.path.realpath(root) == want:
            return str(entry.get("id"))
    modules = [f"{e.get('id')}={e.get('root')}" for e in served if e.get("parent")] or "none"
    raise BackendError(
        f"backend {name!r}: vLLM serves no LoRA module for the adapter {adapter} (its modules: "
        f"{modules}): start it with --enable-lora --lora-modules NAME={adapter}"
    )
