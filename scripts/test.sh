#!/usr/bin/env bash
# The README's test command: installs the dev dependencies into .venv (created if missing),
# then runs ruff, mypy and the whole test suite. Extra arguments go to one pytest run of
# them. Without arguments the suite runs in two parts: the tests that need no server on both
# cores (pytest-xdist, -n 2), then the integration tests (real servers, shared by the tests of
# one process) in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${INFERCHECK_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[dev]"
# The browser test (tests/plugin/test_report_browser.py) drives the system's Chromium through
# playwright: Debian's package, installed once when missing and apt is there (a browser build
# of playwright's own is a download this project does not rely on). Under CI=true a missing
# browser fails that test.
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 \
    && [ "$(id -u)" -eq 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" pytest_infercheck
if [ "$#" -gt 0 ]; then
    exec "$VENV/bin/python" -m pytest "$@"
fi
"$VENV/bin/python" -m pytest -n 2 tests/unit tests/http tests/harness tests/plugin
"$VENV/bin/python" -m pytest tests/integration
