"""The pinned llama-cpp-python sdist, the only download of ``make_realistic.py``: kept in the
cache, its ``vendor/llama.cpp/models`` (vocab GGUFs, test vectors, chat templates) extracted once.

It is the sdist ``scripts/build_llama_server.sh`` builds llama-server from, kept in
``~/.cache/pytest-infercheck/sdist`` (``INFERCHECK_CACHE``) and downloaded with ``pip
download`` on a miss. ``make_realistic.py`` re-exports these names.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("INFERCHECK_CACHE") or Path.home() / ".cache" / "pytest-infercheck")
SDIST_VERSION = os.environ.get("INFERCHECK_LLAMA_CPP_PYTHON_VERSION", "0.3.36")


def sdist_path() -> Path:
    """The pinned llama-cpp-python sdist, kept in the cache (``pip download`` on a miss)."""
    folder = CACHE / "sdist"
    found = sorted(folder.glob(f"llama_cpp_python-{SDIST_VERSION}.tar.gz"))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download-", dir=folder) as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "-q",
                "--disable-pip-version-check",
                "--no-deps",
                "--no-binary",
                ":all:",
                f"llama-cpp-python=={SDIST_VERSION}",
                "-d",
                tmp,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        (got,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        os.replace(got, folder / got.name)
    return folder / f"llama_cpp_python-{SDIST_VERSION}.tar.gz"


def sdist_models_dir() -> Path:
    """``vendor/llama.cpp/models`` of the sdist (vocab GGUFs, test vectors, templates),
    extracted once into the cache (atomically)."""
    target = CACHE / "sdist" / f"llama.cpp-models-{SDIST_VERSION}"
    if (target / "templates").is_dir():
        return target
    sdist = sdist_path()
    prefix = f"llama_cpp_python-{SDIST_VERSION}/vendor/llama.cpp/models/"
    with tempfile.TemporaryDirectory(prefix=".extract-", dir=target.parent) as tmp:
        work = Path(tmp) / "models"
        with tarfile.open(sdist) as tar:
            for member in tar.getmembers():
                rel = member.name[len(prefix) :]
                if not member.isfile() or not member.name.startswith(prefix):
                    continue
                if not (rel.startswith("ggml-vocab-") or rel.startswith("templates/")):
                    continue
                dest = work / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                source = tar.extractfile(member)
                assert source is not None
                dest.write_bytes(source.read())
        try:
            os.replace(work, target)
        except OSError:
            if not (target / "templates").is_dir():
                raise
    return target


def template_text(name: str) -> str:
    """The chat template ``models/templates/<name>.jinja`` of the sdist."""
    path = sdist_models_dir() / "templates" / f"{name}.jinja"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.jinja"))
        raise ValueError(f"no template {name!r}; the sdist has: {', '.join(names)}")
    return path.read_text()
