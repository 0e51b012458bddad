#!/usr/bin/env bash
# Installs vllm-mlx 0.6.0 into its own lean virtual environment (idempotent) and prints the
# absolute path of its `vllm-mlx` executable as the last line of stdout.
#
#   bash scripts/install_vllm_mlx.sh [--force]
#
# Where: ${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/vllm-mlx-0.6.0/venv
# Python: ${INFERCHECK_PYTHON:-python3} (3.10+).
#
# Lean: vllm-mlx's declared dependencies pull torch, torchvision, gradio, opencv, mlx-vlm, ...
# (about 6.5 GB). `vllm-mlx serve MODEL_DIR` for a text model needs none of them: vllm-mlx is
# installed with --no-deps, plus what its import chain for `serve` needs (found by running
# serve and reading its source; see examples/models/SERVERS.md): mlx (cpu on Linux), the
# mlx-lm it pins (0.31.x), fastapi/starlette, uvicorn, python-multipart (fastapi needs it for
# the audio upload routes), jsonschema, requests, psutil (cache sizing from free RAM; without
# it the prefix cache falls back to a fixed limit). torch is not needed. pip and setuptools
# are removed from the finished environment (`python -m ensurepip` puts pip back).
#
# Atomic: the environment is built in a temporary folder next to its final place, checked
# (`import vllm_mlx.server`), stamped, has its absolute paths rewritten, and renamed into
# place. A stamp whose content differs from this script's spec causes a rebuild. Concurrent
# runs are serialised with flock where it exists; without it, a run that loses the final
# rename discards its own build and uses the winner's. A rebuild (--force, or a changed spec)
# deletes the previous environment at the end.
set -euo pipefail

VERSION=0.6.0
ROOT="${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/vllm-mlx-$VERSION"
STAMP_NAME=.infercheck-stamp
PY="${INFERCHECK_PYTHON:-python3}"

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

log() { echo "install_vllm_mlx: $*" >&2; }

if [ "$(uname -s)" = Darwin ]; then
    MLX_REQS=("mlx==0.32.4" "mlx-lm==0.31.3")
else
    MLX_REQS=("mlx[cpu]==0.32.4" "mlx-lm[cpu]==0.31.3")
fi
# Installed with their own dependencies (small: transformers, tokenizers, numpy, pydantic...).
DEP_REQS=(
    "${MLX_REQS[@]}"
    "fastapi==0.165.0"
    "starlette==1.10.0"
    "uvicorn==0.54.0"
    "python-multipart==0.0.34"
    "jsonschema==4.26.0"
    "requests==2.34.2"
    "psutil==7.2.2"
)
MAIN_REQ="vllm-mlx==$VERSION"

PY_VERSION="$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
    log "$PY is Python $PY_VERSION; vllm-mlx needs 3.10+ (set INFERCHECK_PYTHON)"
    exit 1
}
SPEC="spec 1; python $PY_VERSION; $MAIN_REQ --no-deps; ${DEP_REQS[*]}"

is_ready() {
    [ -f "$1/$STAMP_NAME" ] && [ "$(cat "$1/$STAMP_NAME")" = "$SPEC" ] &&
        [ -x "$1/bin/vllm-mlx" ] && "$1/bin/python" -c '' 2>/dev/null
}

mkdir -p "$ROOT"
ROOT="$(cd "$ROOT" && pwd)" # absolute, whatever INFERCHECK_CACHE is
VENV="$ROOT/venv"
if [ "$force" = 0 ] && is_ready "$VENV"; then
    echo "$VENV/bin/vllm-mlx"
    exit 0
fi

if command -v flock >/dev/null 2>&1; then
    exec 9>"$ROOT/.install.lock"
    flock 9
    if [ "$force" = 0 ] && is_ready "$VENV"; then # another run finished while we waited
        echo "$VENV/bin/vllm-mlx"
        exit 0
    fi
    # Holding the lock, any other build or old folder is a leftover of a killed run.
    rm -rf "$ROOT"/.venv-build.* "$ROOT"/.venv-old.*
fi

BUILD="$(mktemp -d "$ROOT/.venv-build.XXXXXX")"
TRASH=""
cleanup() {
    rm -rf "$BUILD"
    if [ -n "$TRASH" ]; then rm -rf "$TRASH"; fi
}
trap cleanup EXIT

start=$(date +%s)
log "building $VENV (Python $PY_VERSION) in $BUILD"
"$PY" -m venv --prompt "vllm-mlx-$VERSION" "$BUILD"
PIP=("$BUILD/bin/python" -m pip --disable-pip-version-check --no-input -q)
# Dependencies first, vllm-mlx last with --no-deps: pip never sees its declared dependencies.
"${PIP[@]}" install --no-compile "${DEP_REQS[@]}" >&2
"${PIP[@]}" install --no-compile --no-deps "$MAIN_REQ" >&2
"${PIP[@]}" uninstall -y pip setuptools >&2
# The whole import chain of `vllm-mlx serve` (server.py imports every route module), which
# writes the bytecode of what the server imports (no compileall of all 5,373 files).
env -u PYTHONDONTWRITEBYTECODE "$BUILD/bin/python" -c 'import vllm_mlx.cli, vllm_mlx.server' >&2

# A virtual environment is not relocatable: its scripts carry the absolute path of its
# interpreter in their shebang (and activate scripts in VIRTUAL_ENV). Rewrite the build path
# to the final path in bin/ (and pyvenv.cfg's informational `command`) before the rename.
"$PY" "$(dirname "${BASH_SOURCE[0]}")/relocate_venv.py" "$BUILD" "$VENV"
printf '%s' "$SPEC" >"$BUILD/$STAMP_NAME"

# Move the old environment aside (if any), then rename the build into place.
if [ -e "$VENV" ]; then
    TRASH="$(mktemp -d "$ROOT/.venv-old.XXXXXX")"
    mv "$VENV" "$TRASH/"
fi
if ! "$PY" -c 'import os, sys; os.rename(sys.argv[1], sys.argv[2])' "$BUILD" "$VENV" 2>/dev/null; then
    # Lost a race (no flock): accept the other run's environment if it is complete.
    is_ready "$VENV" || {
        log "could not move $BUILD to $VENV"
        exit 1
    }
    log "another run installed $VENV first; using it"
fi
log "done in $(($(date +%s) - start)) s; $(du -sh "$VENV" | cut -f1) at $VENV"
echo "$VENV/bin/vllm-mlx"
