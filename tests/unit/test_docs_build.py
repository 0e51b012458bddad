"""The documentation site builds strictly (``mkdocs build --strict``, as ``scripts/docs.sh``
runs it): a broken link, a missing anchor, a page left out of the nav or a kind unknown to
the schema tables fails the test suite, not only the site."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest import REPO


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    # Every page of the nav was written, and the per-kind tables were generated.
    for page in ("tutorials/quickstart", "reference/checks/determinism", "explanation/metrics"):
        assert (site / page / "index.html").exists(), page
    html = (site / "reference" / "checks" / "determinism" / "index.html").read_text()
    assert "infercheck-schema" not in html and "generated from the schema" in html
