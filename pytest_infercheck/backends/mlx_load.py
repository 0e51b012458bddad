"""mlx-lm's models in this process: where the weights come from (:class:`MlxModelSpec`),
loaded once per process and shared by every backend that names the same weights
(:func:`load_model`), and a token's text for reports (:func:`token_piece`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib import metadata
from typing import Any

from .base import BackendError
from .vocab_fingerprint import vocabulary_fingerprint


@dataclass(frozen=True)
class MlxModelSpec:
    """Where the weights come from: a local folder or a hub repo (users' real models)."""

    source: str
    revision: str | None = None
    dtype: str | None = None
    """Cast the weights (e.g. ``float32``, to compare exactly with a float32 engine)."""
    adapter: str | None = None
    """A LoRA adapter folder (mlx-lm's format: ``adapter_config.json`` and
    ``adapters.safetensors``), applied by ``mlx_lm.load(..., adapter_path=)``; the cast to
    ``dtype`` comes after, so it covers the adapter's weights too."""


@dataclass
class Loaded:
    """A loaded model: its weights, tokenizer, config and vocabulary fingerprint."""

    model: Any
    tokenizer: Any
    config: dict[str, Any]
    fingerprint: str


_LOADED: dict[MlxModelSpec, Loaded] = {}
_LOAD_LOCK = threading.Lock()


def load_model(spec: MlxModelSpec) -> Loaded:
    """Load (once per process) the model and tokenizer for ``spec``."""
    with _LOAD_LOCK:
        if spec not in _LOADED:
            try:
                from mlx_lm import load
            except ImportError as exc:  # pragma: no cover - depends on the environment
                raise BackendError(
                    "the mlx-lm backend needs mlx and mlx-lm: pip install 'pytest-infercheck[mlx]'"
                ) from exc
            try:
                model, tokenizer, config = load(  # type: ignore[misc]
                    spec.source,
                    revision=spec.revision,
                    adapter_path=spec.adapter,
                    return_config=True,
                )
            except Exception as exc:
                with_adapter = f" with the adapter {spec.adapter!r}" if spec.adapter else ""
                raise BackendError(
                    f"mlx-lm could not load {spec.source!r}{with_adapter}: {exc}"
                ) from exc
            if spec.dtype is not None:
                import mlx.core as mx

                model.set_dtype(getattr(mx, spec.dtype))
            fingerprint = vocabulary_fingerprint(tokenizer, spec.source)
            _LOADED[spec] = Loaded(model, tokenizer, dict(config), fingerprint)
        return _LOADED[spec]


def token_piece(decoded: str, symbol: str) -> str:
    """A token's text for reports: its decoded text, or, when that is part of a multi-byte
    character (decodes to U+FFFD), its bytes as ``<0xE4><0xB8>`` read from the byte-level
    symbol (GPT-2's byte-to-unicode map) or a SentencePiece ``<0xE4>`` byte token."""
    if "\ufffd" not in decoded:
        return decoded
    if symbol.startswith("<0x") and symbol.endswith(">"):
        return symbol
    table = _unicode_to_byte()
    if symbol and all(ch in table for ch in symbol):
        return "".join(f"<0x{table[ch]:02X}>" for ch in symbol)
    return decoded


def _unicode_to_byte() -> dict[str, int]:
    """The inverse of GPT-2's ``bytes_to_unicode`` (byte-level BPE symbols to bytes)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    codes = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, codes, strict=True)}


def version(package: str) -> str | None:
    """The installed version of ``package``, None when it is not installed."""
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
