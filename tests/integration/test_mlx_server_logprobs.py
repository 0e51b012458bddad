"""mlx_lm.server (plugin-started, ``kind: openai, chat: false``) beside mlx-lm in-process on
the tiny adder: the logprobs are negotiated, used and checked.

mlx_lm.server 0.32.2 answers integer ``logprobs`` with HTTP 400 "logprobs must be of type
bool" and gives top-k for ``logprobs: true, top_logprobs: k``: the negotiation records both
and uses the second. What the server's top-k reports is then checked, and it does not hold:
it sends each top-k in ``argpartition`` order and copies the chosen entry from the first of
them instead of the generated token (asked for "46", it reports the chosen tokens "5", "7",
"3"). Ids from such lists are not the generated tokens, so they are not used: the comparison
is by text, its note says why, and every item names the finding and fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.served import mlx_lm_backend
from tests.plugin.helpers import suite_jsonl


def test_mlx_lm_server_logprobs_are_negotiated_compared_and_checked(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    hub = pytester.path / "hub"
    hub.mkdir()
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {{path: '{tiny_models["bf16"]}'}}
backends:
  local: {{kind: mlx-lm}}
{mlx_lm_backend(hub)}suites: [addition.jsonl]
checks:
  - diff: {{model: adder, backends: [local, mlxserver]}}
    min_similarity: 1.0
""",
    )
    result = pytester.runpytest_subprocess(
        "-q", "--infercheck-results=r.json", "-p", "no:cacheprovider"
    )
    doc = json.loads((pytester.path / "r.json").read_text())
    (observed,) = [e["observed"] for e in doc["engines"].values() if e.get("kind") == "openai"]
    assert observed == {"logprobs": True, "logprobs_shape": "bool+top_logprobs"}, doc["engines"]
    items = [i for i in doc["items"] if i["role"] == "prompt"]
    assert len(items) == 8, result.stdout.str()
    for item in items:
        data = item["data"]
        assert data["method"] == "text", (item["name"], data["method"])
        assert data["method_note"], item["name"]  # a text-only comparison says why
        assert data["base_text"] == data["test_text"], item["name"]  # the text agrees
        texts = [f["text"] for f in data["faults"]]  # each a fault record: fault, where, text
        sorted_faults = [t for t in texts if t.startswith("top-k logprobs not sorted")]
        assert sorted_faults and "in the test output at position" in sorted_faults[0], data
        assert item["outcome"] == "failed", item["name"]
    result.stdout.fnmatch_lines(["*top-k logprobs not sorted in the test output at position*"])
