"""Truncation on a real llama-server (llama.cpp of llama-cpp-python 0.3.36, the tiny adder's
f32 GGUF, ``-c 64``, one slot): every generation's ``tokens_evaluated`` is held to the ids
sent (:mod:`pytest_infercheck.backends.prompt_count`).

- Faithful: ``tokens_evaluated`` equals the ids sent (the BOS is among them: the backend
  renders with it), and the items pass.
- Behind a proxy that drops the first half of every generation request's prompt ids
  (``Fault(cut_prompt=True)``), every item of every kind that generates there fails as
  ``truncated``, naming both counts (``the server counted 4 prompt tokens of the 7 sent``):
  a diff, determinism and stress.
- A prompt longer than the context (``-c 64``; 99 ids sent): llama-server refuses it, HTTP
  400 ``request (99 tokens) exceeds the available context size (64 tokens), try increasing
  it``; no silent cut (measured), and the item fails with those words.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

CUT = re.compile(r"the server counted (\d+) prompt tokens of the (\d+) sent: truncated")


def _run(pytester: pytest.Pytester, adder: str, backends: str, checks: str) -> dict[str, Any]:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {adder}\nbackends:\n{backends}"
        f"suites: [addition.jsonl]\nchecks:\n{checks}",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    doc = json.loads((pytester.path / "results.json").read_text())
    return {"stdout": result.stdout.str(), "items": doc["items"]}


CHECKS = (
    "  - diff: {model: adder, backends: [plain, cut]}\n"
    "  - determinism: {target: adder@cut, runs: 2}\n"
    "  - stress: {target: adder@cut, levels: [1, 2]}\n"
    "    min_consistency: 1.0\n"
)


def test_faithful_counts_pass_and_a_cut_prompt_fails_every_kind_as_truncated(
    pytester: pytest.Pytester, adder: str, llama_url: str
) -> None:
    with FaultyProxy(llama_url, Fault(cut_prompt=True)) as proxy:
        backends = (
            f"  plain: {{kind: llama-server, url: '{llama_url}'}}\n"
            f"  cut: {{kind: llama-server, url: '{proxy.url}'}}\n"
        )
        faithful = CHECKS.replace("adder@cut", "adder@plain").replace("[plain, cut]", "[plain]")
        faithful = faithful.replace("backends: [plain]", "backends: [plain, plain2]")
        got = _run(
            pytester,
            adder,
            backends + f"  plain2: {{kind: llama-server, url: '{llama_url}'}}\n",
            faithful,
        )
        failed = [i["name"] for i in got["items"] if i["outcome"] != "passed"]
        assert failed == [], got["stdout"][-4000:]
        assert "truncation not measured" not in got["stdout"]  # every count measured

        got = _run(pytester, adder, backends, CHECKS)
        assert proxy.altered > 0
    items = [i for i in got["items"] if i["role"] != "aggregate"]
    assert len(items) == 8 + 8 + 2, [i["name"] for i in items]
    for item in items:
        said = "\n".join([*item["violations"], item.get("longrepr") or ""])
        match = CUT.search(said)
        assert item["outcome"] != "passed" and match, (item["name"], said)
        counted, sent = int(match[1]), int(match[2])
        assert counted == sent - sent // 2, said  # the second half of the ids got through
    aggregates = [i for i in got["items"] if i["role"] == "aggregate"]
    assert len(aggregates) == 3 and all(a["outcome"] == "failed" for a in aggregates)


def test_a_prompt_over_the_context_fails_with_the_servers_words(
    pytester: pytest.Pytester, adder: str, llama_url: str
) -> None:
    pytester.makefile(".ini", pytest=INI)
    long = "1+2+" * 24 + "3="  # 98 bytes: 99 ids with the BOS, over -c 64
    pytester.makefile(".jsonl", long=json.dumps({"id": "long", "prompt": long, "max_tokens": 4}))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {adder}\n"
        f"backends:\n  plain: {{kind: llama-server, url: '{llama_url}'}}\n"
        "suites: [long.jsonl]\nchecks:\n  - determinism: {target: adder@plain, runs: 2}\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )
    doc = json.loads((pytester.path / "results.json").read_text())
    (item,) = [i for i in doc["items"] if i["name"].endswith("long")]
    said = "\n".join([*item["violations"], item.get("longrepr") or ""])
    assert item["outcome"] == "failed", result.stdout.str()[-3000:]
    assert "HTTP 400" in said, said
    assert "request (99 tokens) exceeds the available context size (64 tokens)" in said, said
