"""What a backend kind declares: its YAML ``kind`` name, the module that builds it, its spec
(the keys its ``backends:`` entry may hold) and the static facts the matrix reads (which
model field it loads, its model shorthand).

The facts are plain data on the kind's line in :mod:`.registry`, and its spec a light model
(:mod:`.spec`), so the matrix, its JSON Schema and the shorthand parser read them without
importing the backend's module (which brings httpx, or mlx and numpy);
:meth:`BackendKind.create` imports the module, when a target first runs on the backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from .spec import BackendSpec, ServedSpec

if TYPE_CHECKING:
    from .base import Backend


@dataclass(frozen=True)
class BackendKind:
    """One kind of backend: its line in :mod:`.registry`."""

    name: str
    """The YAML ``kind:`` of a ``backends:`` entry; the backend's ``kind`` attribute."""
    module: str
    """The module (relative to :mod:`pytest_infercheck.backends`, or absolute) whose
    ``create(name, spec, source, revision, url)`` builds the backend."""
    spec: type[BackendSpec]
    """The model of the kind's ``backends:`` entry (:mod:`.spec`): the keys its engine
    honours. A :class:`~.spec.ServedSpec` is served over HTTP (``url`` or ``serve``; a model
    may be given by ``served_name``); an :class:`~.spec.InProcessSpec` runs in-process.
    Several kinds may share one spec (openai, vllm and vllm-mlx take the same keys)."""
    loads: Literal["path", "gguf"] = "path"
    """The model field the engine loads: ``path`` (a folder, or ``repo``) or ``gguf``."""
    shorthand: str | None = None
    """The kind's model shorthand as help texts show it, ``PREFIX:VALUE`` (``gguf:FILE``): a
    model written ``gguf:./m.gguf`` in ``models:`` is ``{gguf: ./m.gguf}``."""
    by_name: bool = False
    """The shorthand gives the model by name: its value is the name the server knows the
    model by (``served_name``), not a file or folder it loads."""
    adapters: bool = False
    """The kind applies a model's LoRA ``adapter`` (its ``loads`` field of the adapter: a
    folder or a GGUF file); its ``create`` takes ``adapter=``. A model with an adapter on a
    kind without is refused at collection."""

    @property
    def server(self) -> bool:
        """Served over HTTP (its spec is a :class:`~.spec.ServedSpec`)."""
        return issubclass(self.spec, ServedSpec)

    @property
    def prefix(self) -> str | None:
        """The shorthand's prefix (``gguf``), None when the kind has no shorthand."""
        return None if self.shorthand is None else self.shorthand.partition(":")[0]

    @property
    def shorthand_field(self) -> Literal["path", "gguf", "served_name"]:
        """The model field a shorthand's value fills: ``served_name``, ``gguf``, or ``path``
        (a folder, or a hub ``repo`` when the value is ``org/name`` and not a local path)."""
        return "served_name" if self.by_name else self.loads

    def create(
        self,
        name: str,
        spec: BackendSpec,
        source: str,
        revision: str | None,
        url: str | None,
        adapter: str | None = None,
    ) -> Backend:
        """The backend ``name`` serving the model at ``source`` (``url``: where a managed
        server was started, else ``spec.url``) with the LoRA ``adapter`` if any, built by the
        kind's module (imported now). Raises if the backend built carries another kind than
        this line's, or if an adapter is given to a kind that applies none."""
        module = importlib.import_module(self.module, __package__)
        if adapter is not None and not self.adapters:
            raise ValueError(f"a {self.name} backend cannot apply a LoRA adapter")
        extra = {"adapter": adapter} if adapter is not None else {}
        backend: Backend = module.create(name, spec, source, revision, url, **extra)
        if backend.kind != self.name:
            raise RuntimeError(
                f"backend registry line {self.name!r} names {self.module}, which created a "
                f"backend of kind {backend.kind!r}"
            )
        return backend
