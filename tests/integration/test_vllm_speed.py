"""The diff of mlx-lm (float32) against the shared real vLLM made ahead of its items
(``checks/comparison/ahead.py``) gives the records of the one-at-a-time path
(``--infercheck-no-batching``), request for request, with the waits removed:

- the baseline's full-vocabulary pass is shared with its generation: mlx-lm's
  ``score_sync`` runs once per prompt one at a time, never ahead (counted by a conftest
  that wraps it in the inner run);
- vLLM's teacher-forced scorings (``prompt_logprobs``) go in the same burst as its
  generations: more requests in flight at once than the generations alone (counted by a
  pass-through :class:`~tests.faulty_proxy.FaultyProxy`), the same number in all;
- every item's record (method, KL and same-top at every position, margins, inputs) is
  equal between the two paths.

Server: the session's shared float32 vLLM (``vllm_qwen2``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import FaultyProxy
from tests.plugin.conftest import INI

pytestmark = pytest.mark.xdist_group("vllm")

PROMPTS = [
    ("s1", "Explain how a bicycle gear works."),
    ("s2", "Write a short story about a lighthouse keeper."),
    ("s3", "Describe the water cycle in detail."),
    ("s4", "List the steps to bake bread."),
]
MAX_TOKENS = 24
CONCURRENCY = 8
"""Above the 4 generations: the scorings can only be in flight with them when sent with
them."""

COUNTING_CONFTEST = """\
from pathlib import Path

from pytest_infercheck.backends import mlx_lm

_calls = []
_score_sync = mlx_lm.MlxLmBackend.score_sync


def _counted(self, *args, **kwargs):
    _calls.append(1)
    return _score_sync(self, *args, **kwargs)


mlx_lm.MlxLmBackend.score_sync = _counted


def pytest_sessionfinish(session):
    Path("score_calls.txt").write_text(str(len(_calls)))
"""


def _run(pytester: pytest.Pytester, url: str, *extra: str) -> tuple[dict[str, Any], int]:
    """The prompt items' records of one run of the diff against ``url``, by name, and how
    many times mlx-lm scored teacher-forced."""
    result = pytester.runpytest_subprocess(
        "-q", "--infercheck-results=r.json", "-p", "no:cacheprovider", *extra
    )
    assert result.parseoutcomes() == {"passed": len(PROMPTS) + 1}, result.stdout.str()
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    records = {i["name"]: i["data"] for i in items if i["role"] == "prompt"}
    return records, int((pytester.path / "score_calls.txt").read_text())


def test_the_diff_made_ahead_gives_the_records_of_the_one_at_a_time_path(
    pytester: pytest.Pytester, vllm_qwen2: str, realistic_qwen2: Any
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(conftest=COUNTING_CONFTEST)
    suite = "\n".join(
        json.dumps({"id": i, "prompt": p, "max_tokens": MAX_TOKENS}) for i, p in PROMPTS
    )
    pytester.makefile(".jsonl", prompts=suite)
    model = Path(realistic_qwen2.path)
    with FaultyProxy(vllm_qwen2) as proxy:
        pytester.makefile(
            ".yaml",
            infercheck=f"""\
models:
  qwen: {{path: '{model}'}}
backends:
  local32: {{kind: mlx-lm, dtype: float32}}
  vllm: {{kind: vllm, url: '{proxy.url}', chat: false, max_concurrency: {CONCURRENCY}}}
suites: [prompts.jsonl]
checks:
  - diff: {{model: qwen, backends: [local32, vllm]}}
""",
        )
        serial, serial_scores = _run(pytester, proxy.url, "--infercheck-no-batching")
        serial_requests, serial_in_flight = proxy.requests, proxy.max_in_flight
        proxy.max_in_flight = 0
        ahead, ahead_scores = _run(pytester, proxy.url)
        ahead_requests = proxy.requests - serial_requests
        ahead_in_flight = proxy.max_in_flight
    assert sorted(ahead) == sorted(f"{i}[vllm]" for i, _ in PROMPTS)
    for name, record in serial.items():
        assert record["method"] == "teacher-forced-top-k", name
        assert len(record["kl_per_position"]) == len(record["base_ids"]), name
        assert ahead[name] == record, name
    # one-at-a-time: mlx-lm scores each prompt once; ahead: its generation rows are shared
    assert (serial_scores, ahead_scores) == (len(PROMPTS), 0)
    # vLLM: each prompt generated and scored once on both paths (+ the readiness probe)
    assert serial_requests == ahead_requests == 1 + 2 * len(PROMPTS)
    # one-at-a-time: the 4 generations at once, then one scoring after another; ahead: the
    # scorings go out as soon as mlx-lm has the baseline, in flight with the generations
    # when vLLM is still generating then: whether it is depends on the two engines' speeds
    # (a quiet CI machine had vLLM finish first: 4 in flight). Nor do the 4 generations
    # always meet at the server: sent at once, one can be answered before the last arrives
    # (a cold CI run under load saw 3). So only "more than one at once" is asserted here;
    # the requests made up front are counted in tests/unit/test_comparison_ahead.py
    assert serial_in_flight <= len(PROMPTS)
    assert ahead_in_flight > 1


HEAVY_CONFTEST = """\
import sys
from pathlib import Path


def pytest_sessionfinish(session):
    heavy = sorted(
        m for m in sys.modules if m.split(".")[0] in ("mlx", "mlx_lm", "transformers", "tokenizers")
    )
    Path("heavy.txt").write_text(" ".join(heavy))
"""


def test_determinism_on_vllm_loads_no_mlx_lm(
    pytester: pytest.Pytester, vllm_qwen2: str, realistic_qwen2: Any
) -> None:
    """The benchmark's determinism matrix (an mlx-lm backend declared beside the vLLM one,
    ``bench/on_vllm.py``): the run imports neither mlx, mlx-lm, transformers nor tokenizers
    (their import and the 151,936-id tokenizer are most of a diff's load)."""
    pytester.makefile(".ini", pytest=INI)
    pytester.makepyfile(conftest=HEAVY_CONFTEST)
    suite = "\n".join(json.dumps({"id": i, "prompt": p, "max_tokens": 8}) for i, p in PROMPTS)
    pytester.makefile(".jsonl", prompts=suite)
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  qwen: {{path: '{Path(realistic_qwen2.path)}'}}
backends:
  mlx: {{kind: mlx-lm}}
  vllm: {{kind: vllm, url: '{vllm_qwen2}', chat: false}}
suites: [prompts.jsonl]
checks:
  - determinism: {{target: qwen@vllm, runs: 2}}
""",
    )
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": len(PROMPTS) + 1}, result.stdout.str()
    assert (pytester.path / "heavy.txt").read_text() == ""
