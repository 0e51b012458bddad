"""The one list of backend kinds. Adding a backend: its module (a :class:`~.base.Backend`
subclass and a ``create`` factory) and one line here (see :class:`~.kind.BackendKind`).

Each line holds the kind's YAML name, its module, its spec (:mod:`.spec`: the keys its
entry may hold) and the facts the matrix reads (the model field it loads, its model
shorthand). Reading them imports nothing heavy; a kind's module (httpx, mlx, numpy) is
imported when a backend of the kind is first created (:meth:`~.kind.BackendKind.create`).
The YAML ``kind:`` values, which keys each entry may hold (:func:`backend_spec`), the check
that a server has ``url`` or ``serve``, which model field a backend is given, the model
shorthand and the JSON Schema of the matrix all follow from this list.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError, ValidationInfo
from pydantic_core import InitErrorDetails

from ..strict import nearest, plain_message, unknown_key
from .kind import BackendKind
from .spec import (
    BackendSpec,
    LlamaServerSpec,
    MlxLmSpec,
    OllamaSpec,
    OpenAIServerSpec,
    SglangSpec,
    VllmSpec,
    error_at,
)

BACKENDS: tuple[BackendKind, ...] = (
    BackendKind("mlx-lm", ".mlx_lm", MlxLmSpec, shorthand="mlx:DIR", adapters=True),
    BackendKind(
        "openai", ".openai_compat", OpenAIServerSpec, shorthand="openai:NAME", by_name=True
    ),
    BackendKind("vllm", ".vllm", VllmSpec, shorthand="vllm:DIR", adapters=True),
    BackendKind("vllm-mlx", ".vllm_mlx", OpenAIServerSpec, shorthand="vllm-mlx:DIR"),
    BackendKind("sglang", ".sglang", SglangSpec, shorthand="sglang:DIR"),
    BackendKind(
        "llama-server",
        ".llama_server",
        LlamaServerSpec,
        loads="gguf",
        shorthand="gguf:FILE",
        adapters=True,
    ),
    BackendKind("ollama", ".ollama", OllamaSpec, shorthand="ollama:NAME:TAG", by_name=True),
)
"""Every backend kind, in the order error messages and the JSON Schema list them."""

BACKEND_NAMES = tuple(kind.name for kind in BACKENDS)
SERVER_KINDS = tuple(kind.name for kind in BACKENDS if kind.server)
"""Backend kinds served over HTTP (the others run in-process)."""
IN_PROCESS_KINDS = tuple(kind.name for kind in BACKENDS if not kind.server)
ADAPTER_KINDS = tuple(kind.name for kind in BACKENDS if kind.adapters)
"""Backend kinds that apply a model's LoRA ``adapter``."""
SHORTHANDS = {kind.prefix: kind for kind in BACKENDS if kind.prefix is not None}
"""The kinds with a model shorthand, by its prefix (``gguf`` -> llama-server)."""
_BY_NAME = {kind.name: kind for kind in BACKENDS}
KEY_OWNERS: dict[str, list[str]] = {
    key: [k.name for k in BACKENDS if key in k.spec.model_fields]
    for kind in BACKENDS
    for key in kind.spec.model_fields
}
"""Each key a ``backends:`` entry may hold, and the kinds whose spec takes it."""


def backend_kind(name: object) -> BackendKind | None:
    """The backend kind whose YAML name is ``name`` (None for an unknown one)."""
    return _BY_NAME.get(name) if isinstance(name, str) else None


def backend_spec(data: Mapping[str, Any], context: Any = None) -> BackendSpec:
    """A ``backends:`` entry validated by its kind's spec (``context``: pydantic's, e.g. the
    YAML's folder as ``base_dir``). Raises a ``ValidationError`` with every error at its key:
    an unknown kind (naming the known ones), a key of other kinds that this one would ignore
    (naming the kinds that take it), an unknown key (the nearest one this kind takes), and
    what the kind's spec refuses."""
    kind = backend_kind(data.get("kind"))
    if kind is None:
        given = data.get("kind")
        why = "a backend needs a kind" if given is None else unknown_kind(given)
        raise ValidationError.from_exception_data("BackendSpec", [error_at("kind", why, given)])
    fields = kind.spec.model_fields
    errors = [
        error_at(key, _foreign(key, kind), value)
        for key, value in data.items()
        if key not in fields
    ]
    try:
        spec = kind.spec.model_validate(
            {k: v for k, v in data.items() if k in fields}, context=context
        )
    except ValidationError as exc:
        errors += [_kept(e) for e in exc.errors()]
    if errors:
        raise ValidationError.from_exception_data(kind.spec.__name__, errors)
    return spec


def unknown_kind(given: object) -> str:
    """``unknown backend kind 'vLLM' (did you mean 'vllm'?)``, else the known kinds."""
    close = nearest(given, BACKEND_NAMES) if isinstance(given, str) else None
    hint = f"did you mean {close!r}?" if close else f"known kinds: {', '.join(BACKEND_NAMES)}"
    return f"unknown backend kind {given!r} ({hint})"


def validate_backend_entry(value: Any, info: ValidationInfo) -> BackendSpec:
    """The matrix's validator of a ``backends:`` entry (:func:`backend_spec`)."""
    if isinstance(value, BackendSpec):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"a backend is a mapping with a kind ({', '.join(BACKEND_NAMES)})")
    return backend_spec(value, info.context)


def _foreign(key: str, kind: BackendKind) -> str:
    """Why ``key`` is refused on an entry of ``kind``: the kinds that take it, or the keys
    this kind takes."""
    owners = KEY_OWNERS.get(key)
    if not owners:
        return unknown_key(key, kind.spec.model_fields)
    names = ", ".join(owners[:-1]) + (" and " if len(owners) > 1 else "") + owners[-1]
    if not kind.server and key in ("url", "serve"):
        return f"a {kind.name} backend runs in-process: remove {key!r} (a key of {names} backends)"
    return f"{key} is an option of {names} backends, not of a {kind.name} backend"


def _kept(error: Any) -> InitErrorDetails:
    """An error of a kind's spec, kept at its place with its message."""
    loc = tuple(error["loc"])
    details = error_at(str(loc[0]) if loc else "kind", plain_message(error), error["input"])
    details["loc"] = loc
    return details
