"""examples/engine-state run exactly as its README says (``bash
scripts/engine_state_example.sh``: set-up, then ``pytest`` in the folder; extra arguments go
to pytest): the bundled multi-turn suite's first 4 conversations through cache-parity on
llama-server and on vLLM, and ``expect: identical`` speculative decoding, mlx-lm in-process
with a draft model (8 addition prompts) and vLLM's ngram proposer (3 prompts), every item
passing with real cache hits and real drafts. The example starts its own servers by their
``serve:`` commands: llama-server and two vLLMs (plain, shared by cache-parity and the plain
side of the ngram diff; and ngram), each stopped after its last item. Wall time: 79-208 s
on 2 shared cores (four runs), mostly the two vLLM starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from conftest import REPO

VLLM_BLOCK = 32
"""The example's ``--block-size``: vLLM reuses its prefix cache in whole blocks."""


@pytest.mark.xdist_group("vllm")
def test_engine_state_example_passes_with_hits_and_drafts(
    tmp_path: Path, llama_server_bin: Path, vllm_python: Path
) -> None:
    # The script builds llama-server and installs vLLM itself; the fixtures say so first, so
    # that a failed build fails here with its words and, while llama-server is being built
    # (a cold machine), this module starts after those that need no build (xdist_groups.py).
    results = tmp_path / "out.json"
    command = ["bash", "scripts/engine_state_example.sh", "-rA", "-p", "no:cacheprovider"]
    command.append(f"--infercheck-results={results}")
    env = {**os.environ, "INFERCHECK_PYTHON": sys.executable}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    items = json.loads(results.read_text())["items"]
    outcomes = Counter((i["check"], i["outcome"]) for i in items)
    # cache-parity: 4 conversations + the aggregate per server; diffs: prompts + aggregate.
    assert outcomes == {
        ("cache-parity(qwen2.llama)", "passed"): 5,
        ("cache-parity(qwen2.vllm)", "passed"): 5,
        ("diff(vllm-ngram)", "passed"): 4,
        ("diff(mlx-draft)", "passed"): 9,
    }
    prompts = [i for i in items if i["role"] == "prompt"]
    for item in (i for i in prompts if i["kind"] == "cache-parity"):
        vllm = item["check"] == "cache-parity(qwen2.vllm)"
        scenarios = {s["scenario"]: s for s in item["data"]["scenarios"]}
        # vLLM's KV cache (1 GiB) is beyond max_eviction_prompts: eviction not exercised.
        assert scenarios.pop("eviction")["exercised"] is not vllm
        for s in scenarios.values():
            assert s["match"] and s["hit"] == "hit" and s["cached_tokens"] > 0, s
            assert not vllm or s["cached_tokens"] % VLLM_BLOCK == 0, s
    for item in (i for i in prompts if i["kind"] == "diff"):
        (record,) = item["data"]["feature_activity"]
        assert item["data"]["sameness"] == "identical"
        assert record["drafted"] > 0 and "unexercised" not in record, record
