"""An HTTP backend is driven concurrently (bounded by max_concurrency), only for the prompts
that were selected; an in-process one item by item.

The inner runs are subprocesses: an in-process run would unload httpcore modules it imported
lazily, leaving this process's httpx with stale exception classes."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

from .fake_server import Reply, Script, chat_answer, fake_server


def write(pytester: pytest.Pytester, model: Path, url: str, concurrency: int) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models: {{bf16: {{path: '{model}'}}}}
backends:
  local: {{kind: mlx-lm}}
  srv: {{kind: openai, url: '{url}', max_concurrency: {concurrency}}}
suites: [addition.jsonl]
checks:
  - compare: {{baseline: bf16@local, test: bf16@srv}}
""",
    )


@pytest.mark.parametrize("concurrency", [1, 4])
def test_server_side_runs_at_the_requested_concurrency(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], concurrency: int
) -> None:
    script = Script([Reply(body=chat_answer("46"), delay_s=0.2)])
    with fake_server(script) as url:
        write(pytester, tiny_models["bf16"], url, concurrency)
        result = pytester.runpytest_subprocess("-q")
    assert result.parseoutcomes()["passed"] >= 1
    # Each prompt once (prefetched, then reused by its item), after the one logprob probe of
    # readiness (the fake answers without logprobs, so only the one shape chat has is tried).
    assert len(script.requests) == 1 + 8
    assert script.max_in_flight == concurrency


def test_prefetch_only_for_selected_prompts(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    script = Script([Reply(body=chat_answer("46"))])
    with fake_server(script) as url:
        write(pytester, tiny_models["bf16"], url, 4)
        pytester.runpytest_subprocess("-q", "-k", "s01 or s02")
    assert len(script.requests) == 1 + 2  # the logprob probe, then the two prompts
