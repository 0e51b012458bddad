"""LoRA adapters in the matrix: which backend kinds apply a model's ``adapter`` and with
which of its files (:class:`~.matrix.AdapterSpec`: ``gguf`` for llama-server, ``path`` for
mlx-lm and vLLM), said at collection, before any engine starts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from .backends.registry import ADAPTER_KINDS, backend_kind
from .backends.spec import BackendSpec
from .matrix import ModelSpec


class _Entries(Protocol):
    """The matrix's ``models:`` and ``backends:``."""

    @property
    def models(self) -> Mapping[str, ModelSpec]: ...

    @property
    def backends(self) -> Mapping[str, BackendSpec]: ...


def adapter_problem(matrix: _Entries, model: str, backend: str) -> str | None:
    """Why ``model`` (with a LoRA ``adapter``) cannot run on ``backend``: its kind applies no
    adapter (it would answer with the base model's outputs, silently), or the adapter lacks
    the field the kind loads (llama-server: ``gguf``; mlx-lm, vLLM: ``path``). None when it
    can, or the model has no adapter."""
    adapter = matrix.models[model].adapter
    kind = backend_kind(matrix.backends[backend].kind)
    if adapter is None or kind is None:
        return None
    if not kind.adapters:
        return (
            f"model {model!r} has a LoRA adapter, which a {kind.name} backend cannot apply "
            f"(it would answer with the base model): backends that apply adapters are "
            f"{', '.join(ADAPTER_KINDS)}"
        )
    field = "gguf" if kind.loads == "gguf" else "path"
    if getattr(adapter, field) is None:
        what = "a GGUF LoRA file" if field == "gguf" else "an adapter folder"
        return f"model {model!r}'s adapter has no {field!r} ({what}), which a {kind.name} loads"
    return None


def adapter_engages(matrix: _Entries, model: str, kind: str) -> bool:
    """Whether a backend of ``kind`` applies ``model``'s LoRA adapter (a feature whose
    engagement ``require_engaged`` judges)."""
    spec = matrix.models.get(model)
    facts = backend_kind(kind)
    if spec is None or spec.adapter is None or facts is None or not facts.adapters:
        return False
    return (spec.adapter.gguf if facts.loads == "gguf" else spec.adapter.path) is not None
