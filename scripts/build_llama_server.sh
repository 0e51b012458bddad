#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp sources vendored in the pinned
# `llama-cpp-python` sdist on PyPI (no other network: no git clone, no prebuilt web UI).
#
#   bash scripts/build_llama_server.sh            # prints the binary's absolute path last
#
# Result: ${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/llama-server/<version>/llama-server
# (a static build: no llama/ggml shared libraries, only system ones such as libgomp), next to
# `build-info.txt` and `build.log`. The downloaded sdist is kept (and reused) in
# ${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/sdist/. Everything else goes to stderr,
# so the last (and only) line of stdout is the binary's path.
#
# Idempotent: when the binary exists and `--version` runs it is reused at once. A build
# happens in a temporary folder beside the cache and is renamed into place only once the
# binary runs, under a lock, so a half-built cache never looks complete.
#
# Environment:
#   INFERCHECK_CACHE                    cache root (default ~/.cache/pytest-infercheck)
#   INFERCHECK_LLAMA_CPP_PYTHON_VERSION llama-cpp-python sdist version (default 0.3.36)
#   INFERCHECK_BUILD_JOBS               parallel compile jobs (default: nproc)
#   PYTHON                              interpreter whose pip downloads the sdist
#                                       (default: the repo's .venv, else python3)
set -euo pipefail

VERSION="${INFERCHECK_LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
CACHE_ROOT="${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}"
mkdir -p "$CACHE_ROOT/llama-server"
PARENT="$(cd "$CACHE_ROOT/llama-server" && pwd -P)"
DEST="$PARENT/$VERSION"
BIN="$DEST/llama-server"
SDIST_DIR="$CACHE_ROOT/sdist"

CMAKE_FLAGS=(
    -DCMAKE_BUILD_TYPE=Release
    -DBUILD_SHARED_LIBS=OFF
    -DLLAMA_CURL=OFF
    -DLLAMA_OPENSSL=OFF
    -DGGML_NATIVE=OFF
    -DLLAMA_BUILD_TESTS=OFF
    -DLLAMA_BUILD_EXAMPLES=OFF
    -DLLAMA_BUILD_SERVER=ON
    -DLLAMA_BUILD_UI=OFF
    -DLLAMA_USE_PREBUILT_UI=OFF
)

log() { echo "build_llama_server: $*" >&2; }
fail_build() { # fail_build WHAT: show the log's tail, keep the whole log, exit 1
    local kept="$PARENT/build-$VERSION-failed.log"
    cp "$BUILD_LOG" "$kept" 2>/dev/null || true
    echo "----- last 60 lines of the build log (whole log: $kept)" >&2
    tail -n 60 "$BUILD_LOG" >&2 || true
    die "$1"
}
die() {
    log "ERROR: $*"
    exit 1
}
runs() { [ -x "$1" ] && "$1" --version >/dev/null 2>&1; }

# ---------------------------------------------------------------- tools
as_root() {
    if [ "$(id -u)" = 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

need_tool() { # need_tool COMMAND DEBIAN_PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    if command -v apt-get >/dev/null 2>&1; then
        log "'$1' is missing; trying: apt-get install -y $2"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2 ||
            { as_root apt-get update -q >&2 &&
                as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2" >&2; } ||
            true
    fi
    command -v "$1" >/dev/null 2>&1 ||
        die "'$1' is required to build llama-server and could not be installed; install it (Debian/Ubuntu: 'apt-get install $2') and re-run"
}

# The whole run is one function, read completely before it starts: editing or checking
# out this file during a build cannot change what the running build executes.
main() {
    if runs "$BIN"; then
        echo "$BIN"
        exit 0
    fi

    # One builder per version at a time; whoever waited re-checks after the lock.
    if command -v flock >/dev/null 2>&1; then
        exec 9>"$PARENT/.lock-$VERSION"
        if ! flock -n 9; then
            log "another build of $VERSION is running; waiting for its lock ($PARENT/.lock-$VERSION)"
            flock 9
        fi
        if runs "$BIN"; then
            echo "$BIN"
            exit 0
        fi
        # Holding the lock: build folders left by interrupted runs are stale.
        rm -rf "$PARENT/.build-$VERSION."*
    fi

    need_tool cmake cmake
    need_tool make make
    need_tool c++ g++
    need_tool cc gcc

    if [ -n "${PYTHON:-}" ]; then
        PY="$PYTHON"
    elif [ -x "$REPO/.venv/bin/python" ]; then
        PY="$REPO/.venv/bin/python"
    else
        PY=python3
    fi
    "$PY" -m pip --version >/dev/null 2>&1 || die "'$PY -m pip' does not work; set PYTHON to an interpreter with pip"

    # ---------------------------------------------------------------- build
    WORK="$(mktemp -d "$PARENT/.build-$VERSION.XXXXXX")"
    trap 'rm -rf "$WORK"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    BUILD_LOG="$WORK/build.log"
    start=$(date +%s)

    # The sdist is kept in the cache: examples/models/make_realistic.py reads its vocab
    # GGUFs and chat templates. Downloaded beside it, then renamed into place.
    SDIST="$SDIST_DIR/llama_cpp_python-$VERSION.tar.gz"
    if [ ! -f "$SDIST" ]; then
        log "downloading the llama-cpp-python $VERSION sdist from PyPI"
        "$PY" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
            "llama-cpp-python==$VERSION" -d "$WORK/sdist" >&2 ||
            die "pip could not download llama-cpp-python==$VERSION (sdist)"
        got="$(ls "$WORK"/sdist/llama_cpp_python-*.tar.gz 2>/dev/null | head -n 1)"
        [ -n "$got" ] || die "no llama_cpp_python-*.tar.gz in $WORK/sdist"
        mkdir -p "$SDIST_DIR"
        mv "$got" "$SDIST"
    fi
    tar -xzf "$SDIST" -C "$WORK"
    SRC="$WORK/llama_cpp_python-$VERSION/vendor/llama.cpp"
    [ -f "$SRC/tools/server/CMakeLists.txt" ] || die "no llama.cpp server sources in $SDIST"

    JOBS="${INFERCHECK_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
    log "configuring (cmake ${CMAKE_FLAGS[*]}); log: $BUILD_LOG"
    cmake -S "$SRC" -B "$WORK/build" "${CMAKE_FLAGS[@]}" >"$BUILD_LOG" 2>&1 ||
        fail_build "cmake configure failed (exit $?)"
    log "building llama-server with $JOBS jobs (about 6 minutes on 2 cores)"
    cmake --build "$WORK/build" --target llama-server -j "$JOBS" >>"$BUILD_LOG" 2>&1 ||
        fail_build "cmake --build failed (exit $?)"

    STAGE="$WORK/out"
    mkdir -p "$STAGE"
    built="$(find "$WORK/build" -type f -name llama-server -perm -u+x | head -n 1)"
    [ -n "$built" ] || die "the build finished but produced no llama-server binary"
    cp "$built" "$STAGE/llama-server"
    # Keep shared libraries only if the build made any (it should not with BUILD_SHARED_LIBS=OFF).
    find "$WORK/build" -name '*.so*' \( -type f -o -type l \) -exec cp -P {} "$STAGE/" \;

    ldd_out="$(cd "$STAGE" && LD_LIBRARY_PATH="$STAGE${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd ./llama-server 2>&1 || true)"
    log "ldd llama-server:"
    echo "$ldd_out" | sed 's/^/    /' >&2
    if echo "$ldd_out" | grep -q "not found"; then
        die "llama-server needs libraries that are not found (see ldd above)"
    fi
    version_out="$("$STAGE/llama-server" --version 2>&1)" || {
        echo "$version_out" >&2
        die "the built llama-server does not run ('--version' failed)"
    }
    end=$(date +%s)
    {
        echo "llama-cpp-python sdist: $VERSION ($(basename "$SDIST"))"
        echo "cmake flags: ${CMAKE_FLAGS[*]}"
        echo "build seconds: $((end - start)) (jobs: $JOBS)"
        echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -srm)"
        echo "--version:"
        echo "$version_out"
    } >"$STAGE/build-info.txt"
    cp "$BUILD_LOG" "$STAGE/build.log"

    # Atomic publish: a leftover (broken) folder is moved aside first, then one rename.
    if [ -e "$DEST" ]; then
        mv "$DEST" "$WORK/old"
    fi
    mv "$STAGE" "$DEST"
    rm -f "$PARENT/build-$VERSION-failed.log"
    runs "$BIN" || die "$BIN does not run after moving it into place"
    log "built in $((end - start)) s: $BIN"
    echo "$BIN"
}

main "$@"; exit $?
