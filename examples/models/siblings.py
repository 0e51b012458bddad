"""Loading the scripts of ``examples/models`` as modules: ``examples`` is not a package, so a
script that uses another loads it by path with :func:`load_sibling`, once per process, under
``infercheck_<name>`` in ``sys.modules`` (where dataclasses look their module up).

An entry point (``make_realistic.py``) loads this module by path first, under
``infercheck_siblings``; the modules it loads then ``from infercheck_siblings import
load_sibling``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

HERE = Path(__file__).resolve().parent


def load_sibling(name: str) -> ModuleType:
    """``examples/models/<name>.py`` as a module, loaded once and kept in ``sys.modules``
    (removed again if it fails to load)."""
    key = f"infercheck_{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[key]
            raise
    return sys.modules[key]
