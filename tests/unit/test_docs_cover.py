"""Nothing of the README was lost when it became a landing page: every sentence, table row and
code line of the last full README (``scripts/check_docs_cover.py``'s ``FULL_README``) is in
some page of ``docs/``, or listed as deliberately dropped with why."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from types import ModuleType

import pytest

from conftest import REPO


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "check_docs_cover", REPO / "scripts" / "check_docs_cover.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


COVER = _script()


def _full_readme() -> str:
    try:
        return str(COVER.readme_at(COVER.FULL_README))
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        pytest.skip(f"git has no {COVER.FULL_README} here (a shallow clone?): {exc}")


def test_every_fact_of_the_full_readme_is_in_the_docs() -> None:
    readme = _full_readme()
    assert len(readme.splitlines()) > 1000  # the full README, not the landing page
    lost = COVER.missing(readme, REPO / "docs")
    assert lost == [], "\n".join(f"README.md:{u.line}: {u.text}" for u in lost)


def test_a_lost_sentence_is_found() -> None:
    """The check is not vacuous: a sentence no page holds is reported with its line."""
    readme = "# t\n\nGeneration is greedy.\nA sentence that no page of the docs holds.\n"
    lost = COVER.missing(readme, REPO / "docs")
    assert [(u.line, u.text) for u in lost] == [(3, "A sentence that no page of the docs holds.")]
