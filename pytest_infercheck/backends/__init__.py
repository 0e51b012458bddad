"""Engine adapters and the factory that builds one from a backend spec of the matrix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend, BackendError, Capabilities, Generation, GenerationParams, PromptInput

if TYPE_CHECKING:
    from ..config import BackendSpec

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
    name: str, spec: BackendSpec, source: str, revision: str | None, url: str | None = None
) -> Backend:
    """Build the backend ``name`` of kind ``spec.kind`` serving the model at ``source``;
    ``url`` is where a managed server was started (else ``spec.url``)."""
    if spec.kind == "mlx-lm":
        from .mlx_lm import MlxLmBackend, MlxModelSpec  # mlx: only where a target runs it

        return MlxLmBackend(
            name, MlxModelSpec(source, revision, spec.dtype), chat=spec.chat, add_bos=spec.add_bos
        )
    # httpx: every other backend is a server; each module loaded only where a target uses it
    from .http import HttpSettings

    base_url = url or spec.url
    assert base_url is not None
    settings = HttpSettings(
        base_url=base_url.rstrip("/"),
        timeout_s=spec.timeout,
        max_concurrency=spec.max_concurrency,
        retries=spec.retries,
        api_key_env=spec.api_key_env,
    )
    model = spec.model_name or source
    chat = True if spec.chat is None else spec.chat
    if spec.kind == "openai":
        from .openai_compat import OpenAICompatBackend

        return OpenAICompatBackend(name, settings, model=model, chat=chat)
    if spec.kind == "llama-server":
        from .llama_server import LlamaServerBackend

        return LlamaServerBackend(name, settings, chat=bool(spec.chat))
    if spec.kind == "ollama":
        from .ollama import OllamaBackend

        return OllamaBackend(name, settings, model=model, chat=chat)
    if spec.kind == "vllm-mlx":
        from .vllm_mlx import VllmMlxBackend

        return VllmMlxBackend(name, settings, model=model, chat=chat)
    raise BackendError(f"backend {name!r}: unknown kind {spec.kind!r}")
