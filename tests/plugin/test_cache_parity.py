"""cache-parity through pytester on mlx-lm in-process (the tiny adder, float32): the kept
prompt cache reuses the longest common prefix, and mlx-lm's output through it is identical to
a fresh cache's (logprob differences exactly 0.0), so the strictest tolerance holds. Its
failing side is shown on real servers behind the faulty proxy
(tests/integration/test_cache_parity_servers.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import junit_properties, matrix_yaml, suite_jsonl

CHECKS = """\
  - cache-parity: {target: bf16@local32}
    logprob_tolerance: 0.0
    require_hits: true
"""
BACKENDS = """\
backends:
  local32: {kind: mlx-lm, dtype: float32}
"""


@pytest.fixture
def matrix(pytester: pytest.Pytester, tiny_models: dict[str, Path]) -> None:
    pytester.makefile(".jsonl", addition=suite_jsonl())
    yaml = matrix_yaml({"bf16": tiny_models["bf16"]}, CHECKS)
    pytester.makefile(".yaml", infercheck=yaml.replace("suites:", BACKENDS + "suites:", 1))


def test_mlx_lm_kept_prompt_cache_is_identical_to_a_fresh_one(
    pytester: pytest.Pytester, matrix: None
) -> None:
    result = pytester.runpytest("-q", "--junitxml=out.xml", "-rA")
    result.assert_outcomes(passed=9)
    cases = junit_properties(pytester.path / "out.xml")
    s01 = cases["s01"]
    # s01 "12+34=" is <s> 1 2 + 3 4 = (7 ids). Its sibling "12+3=4" shares <s> 1 2 + 3: 5
    # tokens reused; the exact repeat reuses all but the last prompt token (one is always
    # fed): 6; after the eviction prompt "0 =43+21" only <s> is shared: 1.
    assert s01["infercheck_cached_tokens_shared_prefix"] == "5"
    assert s01["infercheck_cached_tokens_exact_repeat"] == "6"
    assert s01["infercheck_cached_tokens_eviction"] == "1"
    assert "infercheck_cached_tokens_concurrent" not in s01
    assert s01["infercheck_scenarios"] == "4"
    assert s01["infercheck_matching_scenarios"] == "4"
    assert cases["aggregate"]["infercheck_parity_prompts"] == "8"
