#!/usr/bin/env bash
# The README's test command: installs the dev dependencies into .venv (created if missing),
# then runs ruff, mypy and the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${INFERCHECK_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" pytest_infercheck
"$VENV/bin/python" -m pytest "$@"
