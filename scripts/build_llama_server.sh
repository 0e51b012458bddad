#!/usr/bin/env bash
# Build llama.cpp's `llama-server` from the llama.cpp sources vendored in the pinned
# `llama-cpp-python` sdist on PyPI (no other network: no git clone, no prebuilt web UI).
#
#   bash scripts/build_llama_server.sh            # prints the binary's absolute path last
#
# Result: ${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}/llama-server/<version>-<flavour>/llama-server
# (a static build: no llama/ggml shared libraries, only system ones such as libgomp), next to
# `build-info.txt` and `build.log`. The flavour (FLAVOUR below, now `o1glue`) names how it is
# compiled, so that a cache holding another flavour is not reused: a Release build (-O3) in
# which every file outside llama.cpp's ggml/ is compiled at -O1 (scripts/llama_glue_o1.sh).
# ggml, the numeric kernels, keeps -O3 and its results; the glue (server, HTTP, JSON, chat
# parsers, multimodal, model loading) at -O1 cut a cold build from 444-451 to 324-343 CPU-s
# (user+sys; 235-297 to 172-182 s on 2 cores, two builds each; the answers bit-identical).
# The downloaded sdist is kept (and reused) in
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
FLAVOUR=o1glue # change it with the way the binary is compiled (tests/integration/xdist_groups.py)
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
CACHE_ROOT="${INFERCHECK_CACHE:-$HOME/.cache/pytest-infercheck}"
mkdir -p "$CACHE_ROOT/llama-server"
PARENT="$(cd "$CACHE_ROOT/llama-server" && pwd -P)"
DEST="$PARENT/$VERSION-$FLAVOUR"
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
    # + -DCMAKE_{C,CXX}_COMPILER_LAUNCHER=scripts/llama_glue_o1.sh;<sources>/ggml, in main()
)

log() { echo "build_llama_server: $*" >&2; }
fail_build() { # fail_build WHAT: show the log's tail, keep the whole log, exit 1
    local kept="$PARENT/build-$VERSION-$FLAVOUR-failed.log"
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
        exec 9>"$PARENT/.lock-$VERSION-$FLAVOUR"
        if ! flock -n 9; then
            log "another build of $VERSION-$FLAVOUR is running; waiting for its lock ($PARENT/.lock-$VERSION-$FLAVOUR)"
            flock 9
        fi
        if runs "$BIN"; then
            echo "$BIN"
            exit 0
        fi
        # Holding the lock: build folders left by interrupted runs are stale.
        rm -rf "$PARENT/.build-$VERSION-$FLAVOUR."*
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
    WORK="$(mktemp -d "$PARENT/.build-$VERSION-$FLAVOUR.XXXXXX")"
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
    LAUNCHER="$REPO/scripts/llama_glue_o1.sh;$SRC/ggml"
    CMAKE_FLAGS+=("-DCMAKE_C_COMPILER_LAUNCHER=$LAUNCHER" "-DCMAKE_CXX_COMPILER_LAUNCHER=$LAUNCHER")
    log "configuring (cmake ${CMAKE_FLAGS[*]}); log: $BUILD_LOG"
    cmake -S "$SRC" -B "$WORK/build" "${CMAKE_FLAGS[@]}" >"$BUILD_LOG" 2>&1 ||
        fail_build "cmake configure failed (exit $?)"
    log "building llama-server with $JOBS jobs (about 3 minutes on 2 cores)"
    cmake --build "$WORK/build" --target llama-server -j "$JOBS" >>"$BUILD_LOG" 2>&1 ||
        fail_build "cmake --build failed (exit $?)"

    # The launcher logs each file's -O flags: ggml's must all be -O3, the others' -O1.
    n_o1="$(grep -c '^llama_glue_o1: -O1 ' "$BUILD_LOG" || true)"
    n_o3="$(grep -c '^llama_glue_o1: -O3 ' "$BUILD_LOG" || true)"
    ggml_not_o3="$(grep '^llama_glue_o1: ' "$BUILD_LOG" | grep -F " $SRC/ggml/" | grep -vc '^llama_glue_o1: -O3 ' || true)"
    [ "$n_o1" -gt 0 ] && [ "$n_o3" -gt 0 ] && [ "$ggml_not_o3" = 0 ] ||
        fail_build "scripts/llama_glue_o1.sh: $n_o1 files at -O1, $n_o3 at -O3, $ggml_not_o3 of ggml/ not at -O3 (grep '^llama_glue_o1:' in the log)"

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
        echo "flavour: $FLAVOUR: $n_o3 files under ggml/ at -O3, $n_o1 others at -O1 (scripts/llama_glue_o1.sh)"
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
    rm -f "$PARENT/build-$VERSION-$FLAVOUR-failed.log"
    runs "$BIN" || die "$BIN does not run after moving it into place"
    log "built in $((end - start)) s: $BIN"
    echo "$BIN"
}

main "$@"; exit $?
