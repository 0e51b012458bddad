"""The plugin's fixtures used from users' own Python tests (sync and async, strict mode)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from .conftest import INI
from .helpers import suite_jsonl

USER_TESTS = """
import pytest

@pytest.mark.parametrize("infercheck_target", ["bf16@local"], indirect=True)
def test_generate(infercheck_target):
    gen = infercheck_target.generate("12+34=", max_tokens=5)
    assert gen.finish_reason == "stop" and gen.text.isdigit()
    assert infercheck_target.backend.capabilities.teacher_forcing

@pytest.mark.infercheck_target("q4@local")
def test_marker_and_compare(infercheck_target, infercheck_engine, infercheck_matrix):
    from pytest_infercheck.fixtures import TargetHandle
    target = infercheck_matrix.target("bf16@local", ("models",))
    base = TargetHandle(infercheck_engine, infercheck_engine.resolve(infercheck_matrix, target))
    result = infercheck_target.compare_to(base, "99+99=", answer="198", answer_kind="number")
    assert result.method == "teacher-forced" and result.kl_mean > 0

@pytest.mark.asyncio
@pytest.mark.parametrize("infercheck_target", ["bf16@local"], indirect=True)
async def test_async_generate(infercheck_target):
    gen = await infercheck_target.agenerate("50+25=", max_tokens=5)
    assert gen.token_ids[-1] == 2

def test_unknown_target_is_a_clear_failure(request, infercheck_matrix):
    from pytest_infercheck.yamlpos import SourceError
    with pytest.raises(SourceError, match="unknown model 'q5'"):
        infercheck_matrix.target("q5@local", ("models",))
"""


def test_fixtures_in_user_tests(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix("  - compare: {baseline: bf16, test: q4}\n")
    pytester.makepyfile(test_user=USER_TESTS)
    pytester.makefile(".ini", pytest=INI + "asyncio_mode = strict\n")
    result = pytester.runpytest("-q", "test_user.py")
    result.assert_outcomes(passed=4)


def test_target_without_name_fails_clearly(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix("  - compare: {baseline: bf16, test: q4}\n")
    pytester.makepyfile(test_user="def test_x(infercheck_target):\n    pass\n")
    result = pytester.runpytest("-q", "test_user.py")
    result.assert_outcomes(errors=1)  # a fixture that fails is a setup error
    result.stdout.fnmatch_lines(["*needs a 'model@backend' name*"])


def test_which_items_keep_a_managed_server(
    pytester: pytest.Pytester, tiny_models: dict[str, Any]
) -> None:
    """A server is needed by its checks' items (aggregate included) and, since their use is
    unknown, by every Python test that uses the plugin's engine (counted as ANY); a test
    that does not use it keeps no server."""
    from pytest_infercheck.config import load_matrix
    from pytest_infercheck.servers import ANY, server_spec

    pytester.makefile(".jsonl", addition=suite_jsonl())
    matrix = pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  bf16: {{path: '{tiny_models["bf16"]}'}}
backends:
  local: {{kind: mlx-lm}}
  srv: {{kind: openai, serve: "never-run --model {{model}} --port {{port}}"}}
suites: [addition.jsonl]
checks:
  - compare: {{baseline: bf16@local, test: bf16@srv}}
    min_similarity: 1.0
  - determinism: {{target: bf16@local}}
""",
    )
    pytester.makepyfile(
        test_user="""
import pytest

@pytest.mark.infercheck_target("bf16@srv")
def test_uses_a_target(infercheck_target):
    pass

def test_uses_nothing():
    pass
"""
    )
    # counted in a subprocess: an in-process run unloads the modules it imported (httpx
    # among them), which breaks the exception classes of later tests' HTTP clients
    pytester.makeconftest(
        """
import json
from pytest_infercheck.server_lifecycle import needed_counts

def pytest_collection_finish(session):
    with open("needed.json", "w") as out:
        json.dump(needed_counts(session.items), out)
"""
    )
    pytester.runpytest_subprocess("--collect-only", "-q")
    loaded = load_matrix(matrix)
    spec = loaded.matrix.backends["srv"]
    key = server_spec(spec, loaded.model_source("bf16", "openai")[0]).key
    needed = json.loads((pytester.path / "needed.json").read_text())
    assert needed == {key: 9, ANY: 1}  # 8 prompts + aggregate; one user test
