#!/usr/bin/env bash
# Runs examples/engine-state as its README says: set-up, then pytest in that folder.
# Set-up (each step cached): llama-server (scripts/build_llama_server.sh), vLLM's CPU build
# (scripts/install_vllm.sh), the realistic Qwen2 (examples/models/make_realistic.py:
# models/qwen2, HF folder and f32 GGUF) and the tiny models with their draft model
# (examples/models/make_models.py: examples/quickstart/models/tiny-draft). pytest then runs
# with llama-server and vLLM's python first on PATH, for the `serve:` commands. Extra
# arguments go to pytest.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${INFERCHECK_PYTHON:-$REPO/.venv/bin/python}"
LLAMA="$(bash "$REPO/scripts/build_llama_server.sh" | tail -n 1)"
VLLM_PY="$(bash "$REPO/scripts/install_vllm.sh" | tail -n 1)"
"$PY" "$REPO/examples/models/make_models.py" "$REPO/examples/quickstart/models" >/dev/null
cd "$REPO/examples/engine-state"
[ -f models/qwen2/gguf/model-f32.gguf ] ||
    "$PY" "$REPO/examples/models/make_realistic.py" models/qwen2 --vocab qwen2 --seed 0
PATH="$(dirname "$LLAMA"):$(dirname "$VLLM_PY"):$PATH" exec "$PY" -m pytest "$@"
