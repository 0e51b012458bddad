"""The benchmark's two models: a random-weight tiny llama in bf16 and its 4-bit quantization.

Both come from ``examples/models/make_models.py``: ``make_random_model`` (bf16 random
weights: it rambles until ``max_tokens``, so generation dominates the cost, the workload
where a plugin's overhead would show) and ``make_variants(source=...)``, which quantizes it
with ``mlx_lm.convert`` (affine, 4 bits, group size 32). They are cached under
``~/.cache/pytest-infercheck/bench/models``; make_models' stamps rebuild them when its
code, mlx or mlx-lm change.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
import time
from pathlib import Path
from types import ModuleType

from common import MODELS_DIR, REPO

MAKE_MODELS = REPO / "examples" / "models" / "make_models.py"
SEED = 0
BITS = 4
GROUP_SIZE = 32


def _wait_for_make_models(wait_s: float) -> None:
    deadline = time.monotonic() + wait_s
    while not MAKE_MODELS.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"{MAKE_MODELS} does not exist (waited {wait_s:.0f} s)")
        print(f"waiting for {MAKE_MODELS.relative_to(REPO)} ...", flush=True)
        time.sleep(60)


def _import_make_models() -> ModuleType:
    spec = importlib.util.spec_from_file_location("infercheck_make_models", MAKE_MODELS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def bench_models(wait_s: float = 1800.0) -> tuple[Path, Path]:
    """``(bf16_dir, q4_dir)`` of the random tiny llama, made on first use and cached."""
    _wait_for_make_models(wait_s)
    make_models = _import_make_models()
    with contextlib.redirect_stdout(io.StringIO()):
        random_dir = make_models.make_random_model(MODELS_DIR, seed=SEED)
        variants = make_models.make_variants(
            MODELS_DIR / f"random-s{SEED}",
            bits=(BITS,),
            group_size=GROUP_SIZE,
            source=random_dir,
        )
    return Path(variants["bf16"]), Path(variants[f"q{BITS}"])
