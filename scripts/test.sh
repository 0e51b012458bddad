#!/usr/bin/env bash
# The README's test command: installs the dev dependencies into .venv (created if missing),
# then runs ruff, mypy (the package and bench/, at no extra cost: bench imports the package)
# and the whole test suite. Extra arguments go to one pytest run of them. Without arguments
# the whole suite is one pytest run on three workers (pytest-xdist,
# -n 3 --dist loadgroup; tests/integration/xdist_groups.py): each integration module's tests
# on one worker, the modules on the session's vLLMs on one, those starting vLLMs of their own
# one after the other on one, these two chains first, and the tests that need no server last,
# filling the workers as they free up. The integration tests wait on their servers as much
# as they compute: on two cores a third worker takes up that time (measured in
# docs/explanation/performance.md, "Cold CI"). The servers are built and installed in the
# background meanwhile.
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
if [ "$#" -eq 0 ]; then
    # Cold CI: build llama-server and install vLLM and vllm-mlx in the background while lint
    # and the tests run (scripts/build_servers.sh; the fixtures wait for what they need).
    bash scripts/build_servers.sh "$(mktemp -d "${TMPDIR:-/tmp}/infercheck-servers.XXXXXX")" &
    BUILDS=$!
    trap 'kill $BUILDS 2>/dev/null || true' EXIT
fi
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy" pytest_infercheck bench
if [ "$#" -gt 0 ]; then
    exec "$VENV/bin/python" -m pytest "$@"
fi
"$VENV/bin/python" -m pytest -n 3 --dist loadgroup --no-loadscope-reorder tests/integration tests/unit tests/http tests/harness tests/plugin
