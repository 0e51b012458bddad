#!/usr/bin/env bash
# Runs examples/engine-state: makes its model once (examples/models/make_realistic.py:
# models/qwen2, HF folder and f32 GGUF), then pytest in that folder with the built
# llama-server (scripts/build_llama_server.sh) and vLLM's CPU python
# (scripts/install_vllm.sh) first on PATH, for the `serve:` commands. Extra arguments go to
# pytest.
set -euo pipefail
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PY="${INFERCHECK_PYTHON:-$REPO/.venv/bin/python}"
LLAMA="$(bash "$REPO/scripts/build_llama_server.sh" | tail -n 1)"
VLLM_PY="$(bash "$REPO/scripts/install_vllm.sh" | tail -n 1)"
cd "$REPO/examples/engine-state"
[ -f models/qwen2/gguf/model-f32.gguf ] ||
    "$PY" "$REPO/examples/models/make_realistic.py" models/qwen2 --vocab qwen2 --seed 0
PATH="$(dirname "$LLAMA"):$(dirname "$VLLM_PY"):$PATH" exec "$PY" -m pytest "$@"
