"""cache-pollution on real servers, and on a proxy that a hostile request poisons.

Findings on the tiny adder (recorded, not judged; asserted where stable): llama-server
answers the context overflow with HTTP 400 ``exceed_context_size_error``, malformed UTF-8
bytes in the JSON body with HTTP 500 (a JSON parse error: a 400 would be right), lone
surrogates with a completion, and ``n_predict: 0`` with one generated token; it stays alive
and its reference outputs are unchanged. vllm-mlx answers ``max_tokens: 0`` with HTTP 422
and runs an over-long prompt; it also stays alive and unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_infercheck.backends.hostile import HOSTILE_MARKER
from tests.faulty_proxy import Fault, FaultyProxy
from tests.plugin.conftest import INI
from tests.plugin.helpers import ADDITION, suite_jsonl

PROMPTS = ADDITION[:3]
CHECK = (
    "  - cache-pollution: {target: adder@llama, hostile: [context-overflow, invalid-utf8,"
    " special-tokens, max-tokens-0, disconnect]}"
)


def run(pytester: pytest.Pytester, url: str, model: str, backend: str = "llama-server") -> Any:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl(PROMPTS))
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {model}\n"
        f"backends:\n  llama: {{kind: {backend}, url: '{url}'}}\n"
        f"suites: [addition.jsonl]\nchecks:\n{CHECK}\n",
    )
    return pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=results.json"
    )


def records(pytester: pytest.Pytester) -> dict[str, dict[str, Any]]:
    """Item name -> data, from the JSON results."""
    results = json.loads((pytester.path / "results.json").read_text())
    return {item["name"]: item["data"] for item in results["items"]}


def test_llama_server_survives_hostile_requests(
    pytester: pytest.Pytester, llama_url: str, adder: str
) -> None:
    result = run(pytester, llama_url, adder)
    assert result.parseoutcomes() == {"passed": 5 + 1}, result.stdout.str()
    data = records(pytester)
    assert data["context-overflow"]["response"].startswith("HTTP 400")
    assert "raw bytes: HTTP 500" in data["invalid-utf8"]["response"]
    assert data["disconnect"]["response"] == "HTTP 200, closed after the first event"
    assert all(data[k]["alive"] and data[k]["changed"] == [] for k in data if k != "aggregate")
    assert data["aggregate"]["n_polluted"] == 0


def test_poisoned_server_fails(pytester: pytest.Pytester, llama_url: str, adder: str) -> None:
    with FaultyProxy(llama_url, Fault(poison=HOSTILE_MARKER)) as proxy:
        result = run(pytester, proxy.url, adder)
    assert result.parseoutcomes() == {"failed": 5 + 1}, result.stdout.str()
    data = records(pytester)
    changed = data["context-overflow"]["changed"]
    assert [c["prompt_id"] for c in changed] == ["s01", "s02", "s03"]
    assert changed[0]["before"] == "46" and changed[0]["after"] != "46"
    assert "reference outputs changed after the context-overflow request" in result.stdout.str()
