"""The one list of backend kinds. Adding a backend: its module (a :class:`~.base.Backend`
subclass and a ``create`` factory) and one line here (see :class:`~.kind.BackendKind`).

Each line holds the kind's YAML name, its module and the facts the matrix reads (server or
in-process, the model field it loads, its model shorthand). Reading them imports nothing
heavy; a kind's module (httpx, mlx, numpy) is imported when a backend of the kind is first
created (:meth:`~.kind.BackendKind.create`). The YAML ``kind:`` values, the check that a
server has ``url`` or ``serve``, which model field a backend is given, the model shorthand
and the JSON Schema of the matrix all follow from this list.
"""

from __future__ import annotations

from .kind import BackendKind
from .options import MlxLmOptions

BACKENDS: tuple[BackendKind, ...] = (
    BackendKind("mlx-lm", ".mlx_lm", server=False, shorthand="mlx:DIR", options=MlxLmOptions),
    BackendKind(
        "openai",
        ".openai_compat",
        server=True,
        shorthand="openai:NAME",
        by_name=True,
        openai_logprobs=True,
    ),
    BackendKind("vllm", ".vllm", server=True, shorthand="vllm:DIR", openai_logprobs=True),
    BackendKind(
        "vllm-mlx", ".vllm_mlx", server=True, shorthand="vllm-mlx:DIR", openai_logprobs=True
    ),
    BackendKind("sglang", ".sglang", server=True, shorthand="sglang:DIR", openai_logprobs=True),
    BackendKind("llama-server", ".llama_server", server=True, loads="gguf", shorthand="gguf:FILE"),
    BackendKind("ollama", ".ollama", server=True, shorthand="ollama:NAME:TAG", by_name=True),
)
"""Every backend kind, in the order error messages and the JSON Schema list them."""

BACKEND_NAMES = tuple(kind.name for kind in BACKENDS)
SERVER_KINDS = tuple(kind.name for kind in BACKENDS if kind.server)
"""Backend kinds served over HTTP (the others run in-process)."""
IN_PROCESS_KINDS = tuple(kind.name for kind in BACKENDS if not kind.server)
SHORTHANDS = {kind.prefix: kind for kind in BACKENDS if kind.prefix is not None}
"""The kinds with a model shorthand, by its prefix (``gguf`` -> llama-server)."""
_BY_NAME = {kind.name: kind for kind in BACKENDS}
OPTION_OWNERS: dict[str, list[str]] = {
    key: [k.name for k in BACKENDS if k.options is not None and key in k.options.model_fields]
    for kind in BACKENDS
    if kind.options is not None
    for key in kind.options.model_fields
}
"""Each backend option key (:attr:`~.kind.BackendKind.options`) and the kinds that take it."""


def backend_kind(name: object) -> BackendKind | None:
    """The backend kind whose YAML name is ``name`` (None for an unknown one)."""
    return _BY_NAME.get(name) if isinstance(name, str) else None
