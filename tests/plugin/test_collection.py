"""Collection through pytester: node ids, selection, options and YAML errors.

Collection never loads a model, so these run without weights.
"""

from __future__ import annotations

import pytest

from .conftest import INI

SUITE = """\
{"id": "add1", "prompt": "12+34=", "answer": "46", "answer_kind": "number", "max_tokens": 4}
{"id": "add2", "prompt": "50+25=", "answer": "75", "answer_kind": "number", "max_tokens": 4}
{"prompt": "7+8=", "answer": "15", "answer_kind": "number"}
"""

MATRIX = """\
models:
  bf16: {path: ./models/bf16}
  q4: {path: ./models/q4, quantization: 4bit}
  q8: {path: ./models/q8, quantization: 8bit}
suites: [arith.jsonl]
checks:
  - compare: {baseline: bf16, test: q4}
    max_kl: 0.05
  - sweep: {baseline: bf16, models: [q8, q4]}
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makefile(".jsonl", arith=SUITE)
    pytester.makefile(".yaml", infercheck=MATRIX)
    return pytester


@pytest.fixture(autouse=True)
def model_folders(pytester: pytest.Pytester) -> None:
    """Collection checks that local models exist (none is loaded here)."""
    for name in ("models/bf16", "models/q4", "models/q8", "m"):
        (pytester.path / name).mkdir(parents=True)


def test_a_missing_model_folder_is_a_collection_error_naming_its_line(
    project: pytest.Pytester,
) -> None:
    (project.path / "models" / "q8").rmdir()
    result = project.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "infercheck.yaml:4: models.q8.path: ./models/q8 does not exist (the folder "
            "*/models/q8; a hub model is written `repo: org/name`)"
        ]
    )
    assert "Repo id must be" not in result.stdout.str()


def collected(result: pytest.RunResult) -> list[str]:
    return [line for line in result.outlines if "::" in line and not line.startswith(" ")]


def test_node_ids_are_stable_and_readable(project: pytest.Pytester) -> None:
    first = collected(project.runpytest("--collect-only", "-q"))
    derived = next(n for n in first if "::p" in n).split("::")[3]
    assert first == [
        "infercheck.yaml::compare(bf16-vs-q4)::arith::add1",
        "infercheck.yaml::compare(bf16-vs-q4)::arith::add2",
        f"infercheck.yaml::compare(bf16-vs-q4)::arith::{derived}",
        "infercheck.yaml::compare(bf16-vs-q4)::arith::aggregate",
        "infercheck.yaml::sweep(bf16)::arith::self-check",
        "infercheck.yaml::sweep(bf16)::arith::add1[q8]",
        "infercheck.yaml::sweep(bf16)::arith::add1[q4]",
        "infercheck.yaml::sweep(bf16)::arith::add2[q8]",
        "infercheck.yaml::sweep(bf16)::arith::add2[q4]",
        f"infercheck.yaml::sweep(bf16)::arith::{derived}[q8]",
        f"infercheck.yaml::sweep(bf16)::arith::{derived}[q4]",
        "infercheck.yaml::sweep(bf16)::arith::aggregate",
    ]
    # A prompt without an id gets one derived from its text: the same in every run.
    assert derived.startswith("p") and len(derived) == 11
    assert collected(project.runpytest("--collect-only", "-q")) == first


@pytest.mark.parametrize(
    ("expr", "count"),
    [("q4", 7), ("add1", 3), ("sweep and q8", 3), ("aggregate", 2), ("compare", 4)],
)
def test_keyword_selection(project: pytest.Pytester, expr: str, count: int) -> None:
    result = project.runpytest("--collect-only", "-q", "-k", expr)
    assert len(collected(result)) == count, result.outlines


def test_num_prompts_command_line_over_ini_over_yaml(project: pytest.Pytester) -> None:
    project.makefile(".yaml", infercheck=MATRIX + "settings: {num_prompts: 1}\n")
    assert len(collected(project.runpytest("--collect-only", "-q"))) == 2 + 4
    project.makefile(".ini", pytest=INI + "infercheck_num_prompts = 2\n")
    assert len(collected(project.runpytest("--collect-only", "-q"))) == 3 + 6
    result = project.runpytest("--collect-only", "-q", "--infercheck-num-prompts", "3")
    assert len(collected(result)) == 4 + 8


def test_suite_limit_in_yaml(project: pytest.Pytester) -> None:
    project.makefile(
        ".yaml",
        infercheck=MATRIX.replace(
            "suites: [arith.jsonl]", "suites: [{suite: arith.jsonl, limit: 1}]"
        ),
    )
    assert len(collected(project.runpytest("--collect-only", "-q"))) == 2 + 4


def test_bundled_suites_collect(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", infercheck=MATRIX.replace("[arith.jsonl]", "[reasoning, code]"))
    ids = collected(pytester.runpytest("--collect-only", "-q"))
    assert "infercheck.yaml::compare(bf16-vs-q4)::reasoning::r001" in ids
    assert any("::code::" in i for i in ids)


def test_other_yaml_files_are_not_collected(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", arith=MATRIX)  # name does not match infercheck*.yaml
    result = pytester.runpytest("--collect-only", "-q")
    assert collected(result) == []


def test_config_option_collects_any_name(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", arith=SUITE)
    pytester.makefile(".yaml", matrix=MATRIX)
    result = pytester.runpytest("--collect-only", "-q", "--infercheck-config", "matrix.yaml")
    assert len(collected(result)) == 12


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (
            MATRIX.replace("test: q4}", "test: q5}"),
            "infercheck.yaml:7: checks[0].compare.test: unknown model 'q5'",
        ),
        (MATRIX.replace("max_kl: 0.05", "max_kl: [1"), "infercheck.yaml:9: invalid YAML"),
        (MATRIX.replace("max_kl: 0.05", "max_kl: -1"), "infercheck.yaml:8: checks[0].max_kl"),
    ],
)
def test_yaml_errors_are_collection_errors_with_lines(
    project: pytest.Pytester, text: str, where: str
) -> None:
    project.makefile(".yaml", infercheck=text)
    result = project.runpytest("-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    escaped = where.replace("[", "[[]")
    result.stdout.fnmatch_lines(["*ERROR collecting infercheck.yaml*", escaped + "*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_bad_suite_line_is_a_collection_error(project: pytest.Pytester) -> None:
    project.makefile(".jsonl", arith=SUITE + '{"id": "x", "prompt": \n')
    result = project.runpytest("-q")
    result.stdout.fnmatch_lines(["*arith.jsonl:4:*"])
    result.stdout.no_fnmatch_line("*Traceback*")


def test_collection_does_not_import_mlx(project: pytest.Pytester) -> None:
    project.makeconftest(
        "import sys\n"
        "def pytest_collection_finish(session):\n"
        "    heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('mlx', 'mlx_lm'))\n"
        "    print('HEAVY', heavy)\n"
    )
    result = project.runpytest_subprocess("--collect-only", "-q", "-s")
    result.stdout.fnmatch_lines(["HEAVY []"])


def test_a_run_without_a_matrix_imports_neither_the_specs_nor_pydantic(
    pytester: pytest.Pytester,
) -> None:
    """The plugin is installed for every pytest run of the user's repo: a run with no matrix
    must not pay for the backends' specs (pydantic, 0.15 s at every run)."""
    pytester.makepyfile(
        "import sys\n"
        "def test_plain():\n"
        "    heavy = sorted(m for m in sys.modules\n"
        "                   if m.split('.')[0] == 'pydantic' or m == 'pytest_infercheck.servers')\n"
        "    assert heavy == []\n"
    )
    result = pytester.runpytest_subprocess("-q")
    result.assert_outcomes(passed=1)


def test_help_lists_options(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(
        ["*--infercheck-num-prompts*", "*--infercheck-max-tokens*", "*--infercheck-config*"]
    )


def test_diff_ids_one_model_across_backends(pytester: pytest.Pytester) -> None:
    pytester.makefile(".jsonl", arith=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck="""\
models: {bf16: {path: ./m}}
backends:
  local: {kind: mlx-lm}
  llama: {kind: openai, url: 'http://127.0.0.1:8080', chat: false}
  vmlx: {kind: vllm-mlx, url: 'http://127.0.0.1:8000'}
suites: [{suite: arith.jsonl, limit: 1}]
checks:
  - diff: {model: bf16, backends: [local, llama, vmlx]}
""",
    )
    assert collected(pytester.runpytest("--collect-only", "-q")) == [
        "infercheck.yaml::diff(bf16)::arith::add1[llama]",
        "infercheck.yaml::diff(bf16)::arith::add1[vmlx]",
        "infercheck.yaml::diff(bf16)::arith::aggregate",
    ]
    pytester.makefile(
        ".yaml",
        infercheck="""\
models: {bf16: {path: ./m}}
suites: [arith.jsonl]
checks:
  - diff: {model: bf16, backends: [local, nowhere]}
""",
    )
    result = pytester.runpytest("--collect-only", "-q")
    result.stdout.fnmatch_lines(
        ["*infercheck.yaml:4: checks[[]0].diff.backends[[]1]: unknown backend*"]
    )


def test_a_key_the_backends_kind_does_not_honour_is_a_collection_error_at_its_line(
    pytester: pytest.Pytester,
) -> None:
    """A vLLM entry with ``dtype`` (mlx-lm's key: vLLM's dtype is its serve command's) and an
    SGLang entry with ``logprobs`` (read by the OpenAI kinds only): each refused at its line,
    naming the kinds that honour it, before anything runs."""
    pytester.makefile(".jsonl", arith=SUITE)
    pytester.makefile(
        ".yaml",
        infercheck="""\
models: {bf16: {path: ./m}}
backends:
  local: {kind: mlx-lm, dtype: float32}
  vllm:
    kind: vllm
    url: 'http://127.0.0.1:8000'
    dtype: float32
  sgl: {kind: sglang, url: 'http://127.0.0.1:30000', logprobs: false}
suites: [arith.jsonl]
checks:
  - diff: {model: bf16, backends: [local, vllm, sgl]}
""",
    )
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*infercheck.yaml:7: backends.vllm.dtype: dtype is an option of mlx-lm backends, "
            "not of a vllm backend",
            "*infercheck.yaml:8: backends.sgl.logprobs: logprobs is an option of openai, vllm "
            "and vllm-mlx backends, not of a sglang backend",
        ]
    )
