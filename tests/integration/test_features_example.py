"""``examples/engine-state/features.yaml`` run as the README says (``cd examples/engine-state
&& pytest features.yaml``): mlx-lm draft-model speculative decoding in-process and vLLM's
ngram speculative decoding, each ``expect: identical`` to plain decoding with
``require_engaged: true``, all passing; every item's ``feature_activity`` shows drafted
tokens. ``python`` in its serve commands is vLLM's (``scripts/install_vllm.sh``), put first
on ``PATH`` as a user who activated that venv would; the run starts two vLLMs of its own
(plain and ngram, about 3.8 GB each)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO, load_example

EXAMPLE = REPO / "examples" / "engine-state"

pytestmark = pytest.mark.xdist_group("vllm")


def test_features_example_passes_and_engages(
    vllm_python: Path, realistic_qwen2: Any, tmp_path: Path
) -> None:
    load_example("make_models").make_variants(REPO / "examples" / "quickstart" / "models")
    results = tmp_path / "out.json"
    env = {**os.environ, "PATH": f"{vllm_python.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "features.yaml",
            "-p",
            "no:cacheprovider",
            # until the folder's pytest.ini collects *.yaml: the file, by its absolute path
            f"--infercheck-config={EXAMPLE / 'features.yaml'}",
            f"--infercheck-results={results}",
        ],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    items = json.loads(results.read_text())["items"]
    prompts = [i for i in items if i["role"] == "prompt"]
    checks = {i["check"] for i in prompts}
    assert checks == {"diff(mlx-draft)", "diff(vllm-ngram)"}
    for item in prompts:
        (record,) = item["data"]["feature_activity"]
        assert item["data"]["sameness"] == "identical"
        assert record["drafted"] > 0 and "unexercised" not in record
