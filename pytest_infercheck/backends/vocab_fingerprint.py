"""A tokenizer's vocabulary fingerprint, and where it is kept between runs.

The fingerprint of a vocabulary ``{token: id}`` is the first 16 hex digits of
``sha256(json.dumps(sorted(vocab.items())))``: two tokenizers with equal fingerprints map
every token to the same id (what lets one engine's prompt ids be sent to another,
:meth:`~.base.Backend.accepts_token_ids`; what a golden file records of its tokenizer).

Computing it for a 151,936-token vocabulary (``get_vocab``, the sort and the JSON) took 0.47 s
of CPU (2.4 s wall at load 14 on 2 cores: ``bench/README.md``, "vLLM") on every run. It is kept
in ``INFERCHECK_CACHE`` (default ``$XDG_CACHE_HOME/pytest-infercheck``, else
``~/.cache/pytest-infercheck``), under ``fingerprints/``, keyed by the SHA-256 of the **contents**
of every file of the model folder that a Hugging Face tokenizer can read (the patterns mlx-lm
fetches for its tokenizer: ``*.json``, ``*.txt``, ``*.model``, ...) with the versions of
transformers and tokenizers, and the formula's own tag: a changed file, even one whose size and
time were kept, is another key. A folder that is not a local directory (a hub name), or a
cache that cannot be read or written, computes it as before.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path
from typing import Any

FORMULA = "vocab-sha256-sorted-json-16"
"""Changes whenever :func:`fingerprint_of` would give another value for the same vocabulary."""
TOKENIZER_PATTERNS = (
    "*.json",
    "*.py",
    "tokenizer.model",
    "*.tiktoken",
    "tiktoken.model",
    "*.txt",
    "*.jsonl",
    "*.jinja",
)
"""The files a tokenizer may read (``mlx_lm.utils.load_tokenizer``'s ``allow_patterns``)."""


def fingerprint_of(vocab: dict[str, int]) -> str:
    """``sha256(json.dumps(sorted(vocab.items())))``, its first 16 hex digits."""
    return hashlib.sha256(json.dumps(sorted(vocab.items())).encode()).hexdigest()[:16]


def cache_dir() -> Path:
    """Where the plugin keeps what it computed between runs (see the module docstring)."""
    if explicit := os.environ.get("INFERCHECK_CACHE"):
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "pytest-infercheck"


def folder_key(folder: Path) -> str | None:
    """The key of ``folder``'s tokenizer files (module docstring); None when ``folder`` is not
    a local directory or has none of them."""
    if not folder.is_dir():
        return None
    files = sorted({p for pattern in TOKENIZER_PATTERNS for p in folder.glob(pattern)})
    if not files:
        return None
    digest = hashlib.sha256(FORMULA.encode())
    for name in ("transformers", "tokenizers"):
        try:
            installed: str | None = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        digest.update(f"\0{name}={installed}".encode())
    for path in files:
        digest.update(f"\0{path.name}\0".encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def vocabulary_fingerprint(tokenizer: Any, folder: str | Path) -> str:
    """``tokenizer``'s fingerprint (:func:`fingerprint_of` its ``get_vocab()``), read from the
    cache when ``folder``'s tokenizer files were fingerprinted before, else computed and
    kept."""
    try:
        key = folder_key(Path(folder).expanduser())
    except OSError:
        key = None
    path = None if key is None else cache_dir() / "fingerprints" / key
    if path is not None:
        try:
            kept = path.read_text().strip()
        except OSError:
            kept = ""
        if len(kept) == 16 and all(c in "0123456789abcdef" for c in kept):
            return kept
    fingerprint = fingerprint_of(tokenizer.get_vocab())
    if path is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(fingerprint)
            partial.replace(path)
        except OSError:
            pass  # not kept: the next run computes it again
    return fingerprint
