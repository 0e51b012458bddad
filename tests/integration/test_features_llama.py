"""llama-server's speculative decoding with a draft model and its quantized KV cache, through
the plugin on the tiny adder, against the module's plain f32 llama-server (``llama_url``):
three extra llama-servers on the tiny GGUF, started by the plugin (under a second each).

- ``-md tiny-draft-f32.gguf --spec-type draft-simple --spec-draft-n-max 3`` drafts on every
  prompt (each answer's ``timings.draft_n``) and its tokens are identical to plain decoding:
  40 tokens drafted over the 8 prompts, 3 accepted (measured);
- ``-md`` alone loads the draft but drafts nothing on this llama.cpp (its ``/props`` say
  ``speculative.types: none``; ``--spec-type`` turns drafting on): identical outputs that
  prove nothing, so every item is ``unexercised`` and fails under ``require_engaged: true``;
- ``-fa on -ctk q8_0 -ctv q8_0`` (a quantized V cache needs flash attention) moves the
  logprobs a little: a measured pooled mean KL against the f32 server within a loose budget
  and over a tight one, the record carrying the cache's 8 bits.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.integration.served import backend, llama_flags, llama_serve
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

DRAFTED, ACCEPTED = 40, 3
"""Draft tokens proposed and accepted over the 8 prompts of ``helpers.ADDITION`` (5 tokens
each, 3 per step; llama.cpp of llama-cpp-python 0.3.36, CPU, measured)."""
KV8_MEAN_KL = (1e-9, 1e-4)
"""The tight and the loose mean-KL budgets of the q8_0 cache (its measured pooled mean KL
lies between them; see the README)."""


def test_draft_model_drafts_and_is_identical_md_alone_is_unexercised_kv8_within_budget(
    pytester: pytest.Pytester,
    adder: str,
    llama_url: str,
    llama_server_bin: Path,
    tiny_draft_gguf: Path,
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    exact = llama_flags(slots=1, context=64)
    draft = f"{exact} -md {tiny_draft_gguf}"
    backends = (
        f"  plain: {{kind: llama-server, url: '{llama_url}'}}\n"
        + backend(
            "spec",
            "llama-server",
            llama_serve(llama_server_bin, f"{draft} --spec-type draft-simple --spec-draft-n-max 3"),
        )
        + backend("mdonly", "llama-server", llama_serve(llama_server_bin, draft))
        + backend(
            "kv8",
            "llama-server",
            llama_serve(llama_server_bin, "-fa on -ctk q8_0 -ctv q8_0 -np 1 -c 64 -t 2"),
        )
    )
    tight, loose = KV8_MEAN_KL
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {adder}
backends:
{backends}suites: [addition.jsonl]
checks:
  - diff: {{model: adder, backends: [plain, spec]}}
    name: drafts
    require_engaged: true
  - diff: {{model: adder, backends: [plain, mdonly]}}
    name: md-only
    require_engaged: true
  - diff: {{model: adder, backends: [plain, kv8]}}
    name: kv8-loose
    expect: budget
    max_mean_kl: {loose}
  - diff: {{model: adder, backends: [plain, kv8]}}
    name: kv8-tight
    expect: budget
    max_mean_kl: {tight}
""",
    )
    result = pytester.runpytest_subprocess(
        "--infercheck-results=out.json", "-p", "no:cacheprovider"
    )
    items = json.loads((pytester.path / "out.json").read_text())["items"]
    prompts = {f"{i['check']}::{i['name']}": i for i in items if i["role"] == "prompt"}
    assert len(prompts) == 4 * 8
    by_check: dict[str, list[dict[str, object]]] = {}
    for name, item in prompts.items():
        check = name.split("::")[0]
        data = item["data"]
        (record,) = data["feature_activity"]
        assert record["side"] == "test" and "llama-server timings" in record["source"], name
        by_check.setdefault(check, []).append(record)
        if check == "diff(drafts)":
            assert data["sameness"] == "identical", name
            assert record["drafted"] > 0 and "unexercised" not in record, name
            assert item["violations"] == [], name
        elif check == "diff(md-only)":
            assert data["sameness"] == "identical", name
            assert (record["drafted"], record["accepted"]) == (0, 0), name
            assert record["unexercised"] == ["speculative decoding never engaged: nothing drafted"]
            assert item["violations"], name
        else:
            assert record["features"] == ["KV cache quantization (-ctk q8_0)"], name
            assert record["kv_bits"] == 8 and "unexercised" not in record, name
            assert record["drafted"] == 0, name
    drafts = by_check["diff(drafts)"]
    assert sum(r["drafted"] for r in drafts) == DRAFTED  # type: ignore[misc]
    assert sum(r["accepted"] for r in drafts) == ACCEPTED  # type: ignore[misc]
    aggregates = {i["check"]: i for i in items if i["role"] != "prompt"}
    (level,) = aggregates["diff(kv8-loose)"]["data"]["levels"]
    mean_kl = level["kl_mean"]
    assert tight < mean_kl < loose, mean_kl
    result.stdout.fnmatch_lines(
        ["unexercised: test adder@mdonly: speculative decoding never engaged: nothing drafted*"]
    )
    assert os.environ.get("CI") != "true" or result.ret == 1
    # drafts: 8 + aggregate; md-only: 8 fail, and its aggregate for them; kv8-loose: 8 +
    # aggregate; kv8-tight: 8 items pass (no per-item gate), its aggregate fails.
    result.assert_outcomes(passed=9 + 9 + 8, failed=8 + 1 + 1)
