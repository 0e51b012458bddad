#!/usr/bin/env bash
# The documentation site: installs the docs extra into .venv (created if missing), then builds
# docs/ strictly into site/ (a warning, a broken link or a missing page fails). `bash
# scripts/docs.sh serve` serves it at http://127.0.0.1:8000 while you write instead.
# tests/unit/test_docs_build.py runs the same strict build in the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${INFERCHECK_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[docs]"
export NO_MKDOCS_2_WARNING=1  # mkdocs-material's banner about its successor
if [ "${1:-build}" = serve ]; then
    exec "$VENV/bin/python" -m mkdocs serve
fi
exec "$VENV/bin/python" -m mkdocs build --strict
