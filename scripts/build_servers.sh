#!/usr/bin/env bash
# Builds llama-server and installs vLLM's CPU build and vllm-mlx at once (the three scripts
# side by side, each idempotent and cached outside the repo), each logged to LOGS/<script>.log;
# waits for all three and exits 0 whatever they did. Run in the background by scripts/test.sh
# and .ci/run while other work goes on: the integration fixtures run the same scripts, which
# wait on their lock (flock) and then find the result; a failed run here is only logged, the
# fixture's own run fails with its words. Stopped with TERM or INT, it stops the three.
#   bash scripts/build_servers.sh LOGS
set -uo pipefail
cd "$(dirname "$0")/.."
LOGS="${1:?usage: build_servers.sh LOGS}"
mkdir -p "$LOGS"
for script in build_llama_server.sh install_vllm.sh install_vllm_mlx.sh; do
    bash "scripts/$script" >"$LOGS/$script.log" 2>&1 &
done
trap 'kill $(jobs -p) 2>/dev/null; exit 143' TERM INT
wait
exit 0
