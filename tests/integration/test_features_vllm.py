"""vLLM's ngram speculative decoding through the plugin, on the realistic Qwen2 (CPU build,
``scripts/install_vllm.sh``), against the session's shared plain vLLM (``vllm_qwen2``):
one extra vLLM, started by the plugin with ``--speculative-config`` (about 30 s, 3.8 GB).

- on prompts whose last 3 tokens occur earlier (``examples/engine-state/ngram.jsonl``) the
  ngram server drafts (vLLM's ``/metrics``: ``spec_decode_num_draft_tokens_total`` grew
  around each request) and its outputs are identical to plain decoding;
- on prompts where no n-gram repeats, nothing is drafted: each item is ``unexercised`` (a
  warning, and a failure in the check with ``require_engaged: true``), although its outputs
  are identical too: the vacuous pass a user would otherwise get.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tests.integration.served import VLLM_ENV, VLLM_FLAGS, vllm_cpu_command
from tests.plugin.conftest import INI

NGRAM = (
    '--speculative-config \'{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}\''
)
QUIET = [("q1", "1 2 3 4 5 6 7 8 9 10"), ("q2", "Hello")]
"""Prompts on which the ngram server drafted nothing in 16 tokens (measured)."""

pytestmark = pytest.mark.xdist_group("vllm")


def test_ngram_is_identical_where_it_drafts_and_unexercised_where_not(
    pytester: pytest.Pytester, vllm_python: Path, vllm_qwen2: str, realistic_qwen2: Any
) -> None:
    pytester.makefile(".ini", pytest=INI)
    (pytester.path / "ngram.jsonl").write_text(
        (REPO / "examples" / "engine-state" / "ngram.jsonl").read_text()
    )
    pytester.makefile(
        ".jsonl",
        quiet="\n".join(json.dumps({"id": i, "prompt": p, "max_tokens": 16}) for i, p in QUIET),
    )
    command = vllm_cpu_command(vllm_python, f"{VLLM_FLAGS} {NGRAM}")
    env = ", ".join(f"{k}: '{v}'" for k, v in VLLM_ENV.items())
    serve = f"  ngram:\n    kind: vllm\n    chat: false\n    serve: {json.dumps(command)}\n"
    serve += f"    env: {{{env}}}\n    startup_timeout: 300\n"
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  qwen: {{path: '{realistic_qwen2.path}'}}
backends:
  plain: {{kind: vllm, url: '{vllm_qwen2}', chat: false}}
{serve}suites: [ngram.jsonl]
checks:
  - diff: {{model: qwen, backends: [plain, ngram]}}
    name: drafts
    require_engaged: true
  - diff: {{model: qwen, backends: [plain, ngram]}}
    name: quiet
    suites: [quiet.jsonl]
  - diff: {{model: qwen, backends: [plain, ngram]}}
    name: quiet-required
    suites: [quiet.jsonl]
    require_engaged: true
""",
    )
    result = pytester.runpytest_subprocess(
        "--infercheck-results=out.json", "-p", "no:cacheprovider"
    )
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    prompts = {f"{i['check']}::{i['name']}": i for i in items if i["role"] == "prompt"}
    assert len(prompts) == 3 + 2 + 2
    for name, item in prompts.items():
        data = item["data"]
        assert data["sameness"] == "identical", name
        (record,) = data["feature_activity"]
        assert record["side"] == "test" and "vLLM /metrics delta" in record["source"]
        if name.startswith("diff(drafts)"):
            assert record["drafted"] >= 3 and "unexercised" not in record, name
            assert item["violations"] == [], name
        else:
            assert record["drafted"] == 0, name
            assert record["unexercised"] == ["speculative decoding never engaged: nothing drafted"]
            assert bool(item["violations"]) == name.startswith("diff(quiet-required)"), name
    assert (
        sum(
            p["data"]["feature_activity"][0]["accepted"]
            for n, p in prompts.items()
            if n.startswith("diff(drafts)")
        )
        > 0
    )
    result.stdout.fnmatch_lines(["*UnexercisedFeatureWarning*nothing drafted*"])
    # drafts: 3 + aggregate; quiet: 2 + aggregate; quiet-required: 2 fail, and its aggregate
    result.assert_outcomes(passed=3 + 1 + 2 + 1, failed=2 + 1)
    assert os.environ.get("CI") != "true" or result.ret == 1
