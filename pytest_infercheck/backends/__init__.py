"""Engine adapters and the factory that builds one from a backend spec of the matrix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend, BackendError, Capabilities, Generation, GenerationParams, PromptInput

if TYPE_CHECKING:
    from .spec import BackendSpec

__all__ = [
    "Backend",
    "BackendError",
    "Capabilities",
    "Generation",
    "GenerationParams",
    "PromptInput",
    "create_backend",
]


def create_backend(
    name: str,
    spec: BackendSpec,
    source: str,
    revision: str | None,
    url: str | None = None,
    adapter: str | None = None,
) -> Backend:
    """Build the backend ``name`` of kind ``spec.kind`` (its entry in :mod:`.registry`)
    serving the model at ``source`` with the LoRA ``adapter`` if any; ``url`` is where a
    managed server was started (else ``spec.url``). The kind's module is imported here,
    where a target first uses it."""
    from ..features import declared_features
    from .registry import backend_kind

    kind = backend_kind(spec.kind)
    if kind is None:
        raise BackendError(f"backend {name!r}: unknown kind {spec.kind!r}")
    backend = kind.create(name, spec, source, revision, url, adapter)
    backend.features = declared_features(spec)
    if adapter is not None:
        from ..features import ADAPTER, Feature

        backend.features = (*backend.features, Feature(ADAPTER, adapter))
    return backend
