#!/usr/bin/env bash
# The README's demo command: installs the package with mlx-lm, pytest-html and gguf into .venv,
# makes the tiny model's bf16 copy, its 8-bit and 4-bit quantizations and the tiny tool model locally (no hub),
# and runs the quickstart matrix, writing report.html.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${INFERCHECK_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[mlx,html,gguf]"
"$VENV/bin/python" examples/models/make_models.py examples/quickstart/models
status=0
# The quickstart is a pytest project of its own (examples/quickstart/pytest.ini).
(cd examples/quickstart && "../../$VENV/bin/python" -m pytest \
    --html=../../report.html --self-contained-html "$@") || status=$?
if [ "$status" -eq 1 ]; then
    echo
    echo "demo: some items failed their thresholds, as they should: the 4-bit model flips"
    echo "answers the bf16 model got right. Open report.html for the details."
    exit 0
fi
exit "$status"
