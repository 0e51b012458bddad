#!/usr/bin/env bash
# Compiler launcher of scripts/build_llama_server.sh (CMAKE_<LANG>_COMPILER_LAUNCHER):
#
#   llama_glue_o1.sh GGML_DIR COMPILER ARGS...
#
# Compiles a source file outside GGML_DIR (llama.cpp's ggml/) at -O1 instead of -O3, then
# execs COMPILER. Only ggml holds the numeric kernels (about 40 of the build's ~410 CPU-s);
# the rest is glue (HTTP, JSON, chat parsers, model loading), which -O3 only makes slower to
# compile. Numerics: ggml keeps -O3, unchanged; GCC's -O levels do not change IEEE results
# without -ffast-math, and with GGML_NATIVE=OFF the glue gets no -m flags (baseline x86-64,
# no FMA), so no contraction either. The file is the one after -c (every file's include
# paths name ggml).
# One line per file on stderr (the build log) gives the -O flags of the command it runs.
set -euo pipefail

ggml_dir="${1%/}/"
shift
src=""
prev=""
for arg in "$@"; do
    [ "$prev" = "-c" ] && src="$arg"
    prev="$arg"
done

args=()
levels=""
for arg in "$@"; do
    case "$src" in
    "" | "$ggml_dir"*) ;;
    *) [ "$arg" = "-O3" ] && arg="-O1" ;;
    esac
    case "$arg" in -O*) levels+="$arg " ;; esac
    args+=("$arg")
done
echo "llama_glue_o1: ${levels:-(no -O) }${src:-(no -c)}" >&2
exec "${args[@]}"
