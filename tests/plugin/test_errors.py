"""The errors a new user reads: ``pytest --collect-only`` on a written ``infercheck.yaml``,
each message asserted whole (the catalogue is docs/reference/errors.md).

A broken file is one collection error listing every mistake at its line, in file order;
one mistake is one message (no follow-ons); suggestions ignore case; no pydantic words.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from pytest_infercheck.checks.registry import KIND_NAMES
from pytest_infercheck.suite_files import bundled_suite_names

BUNDLED = ", ".join(bundled_suite_names())  # reasoning, tool-use, ...
SUITE = '{"id": "a1", "prompt": "1+1=", "answer": "2", "answer_kind": "number"}\n'


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "m").mkdir()
    pytester.makefile(".jsonl", addition=SUITE)
    return pytester


def errors_of(pytester: pytest.Pytester, text: str) -> list[str]:
    """The lines of the collection error of ``infercheck.yaml`` holding ``text``."""
    pytester.makefile(".yaml", infercheck=text)
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.outlines
    assert "Traceback" not in result.stdout.str()
    return [line for line in result.outlines if line.startswith("infercheck.yaml:")]


def test_three_mistakes_of_three_phases_are_said_at_once_in_file_order(
    project: pytest.Pytester,
) -> None:
    """An unknown key (validation), an unknown model (a reference) and an unknown suite
    (a file on this machine): one run shows the three."""
    errors = errors_of(
        project,
        """\
models:
  bf16: {path: ./m}
  q4: {path: ./m, quantisation: 4bit}
suites: [adition]
checks:
  - compare: {baseline: bf16, test: q5}
""",
    )
    assert errors == [
        "infercheck.yaml:3: models.q4.quantisation: unknown key 'quantisation' "
        "(did you mean 'quantization'?)",
        "infercheck.yaml:4: suites[0]: suite 'adition' not found: it is neither a bundled "
        "suite nor an existing file (did you mean 'addition.jsonl'?)",
        "infercheck.yaml:6: checks[0].compare.test: unknown model 'q5' (models: bf16, q4)",
    ]


def test_a_misspelt_kind_is_one_error_not_its_thresholds_too(project: pytest.Pytester) -> None:
    errors = errors_of(
        project,
        """\
models: {bf16: {path: ./m}, q4: {path: ./m}}
suites: [addition.jsonl]
checks:
  - compar: {baseline: bf16, test: q4}
    max_kl: 0.05
    flips: {max_rate: 0.1}
""",
    )
    assert errors == [
        "infercheck.yaml:4: checks[0].compar: unknown check kind 'compar' (did you mean 'compare'?)"
    ]


def test_a_misspelt_key_is_not_also_a_missing_one(project: pytest.Pytester) -> None:
    errors = errors_of(
        project,
        """\
models: {bf16: {path: ./m}, q4: {path: ./m}}
suites: [addition.jsonl]
checks:
  - compare: {baseline: bf16, tst: q4}
""",
    )
    assert errors == [
        "infercheck.yaml:4: checks[0].compare.tst: unknown key 'tst' (did you mean 'test'?)"
    ]


def test_a_check_without_a_kind_names_the_kinds(project: pytest.Pytester) -> None:
    errors = errors_of(
        project,
        """\
models: {q4: {path: ./m}}
suites: [addition.jsonl]
checks:
  - {min_determinism: 0.9}
""",
    )
    kinds = (  # the registry's, in its order (a kind added since is listed last)
        "compare, sweep, diff, determinism, batch-invariance, stress, stream-parity, "
        "endpoint-parity, tokenization, cache-pollution, cache-parity, structured-parity"
    )
    assert ", ".join(KIND_NAMES).startswith(kinds)
    assert errors == [
        f"infercheck.yaml:4: checks[0]: a check needs one of: {', '.join(KIND_NAMES)}"
    ]


def test_suggestions_ignore_case(project: pytest.Pytester) -> None:
    """A backend kind, a check kind, a suite, a key, a model and a choice, each written
    with the wrong case."""
    errors = errors_of(
        project,
        """\
models: {bf16: {path: ./m}, q4: {path: ./m}}
backends:
  local: {kind: mlx-lm}
  gpu: {kind: vLLM, url: 'http://127.0.0.1:8000'}
suites: [Reasoning]
checks:
  - Compare: {baseline: bf16@local, test: q4@local}
  - compare: {baseline: bf16@local, test: Q4@local}
    Max_KL: 0.05
  - determinism: q4@local
    fail_on: Decisive
""",
    )
    assert errors == [
        "infercheck.yaml:4: backends.gpu.kind: unknown backend kind 'vLLM' (did you mean 'vllm'?)",
        "infercheck.yaml:5: suites[0]: suite 'Reasoning' not found: it is neither a bundled "
        "suite nor an existing file (did you mean 'reasoning'?)",
        "infercheck.yaml:7: checks[0].Compare: unknown check kind 'Compare' (did you mean "
        "'compare'?)",
        "infercheck.yaml:8: checks[1].compare.test: unknown model 'Q4' (did you mean 'q4'?)",
        "infercheck.yaml:9: checks[1].Max_KL: unknown key 'Max_KL' (did you mean 'max_kl'?)",
        "infercheck.yaml:11: checks[2].fail_on: expected 'any' or 'decisive', got 'Decisive' "
        "(did you mean 'decisive'?)",
    ]


def test_a_suite_error_is_at_its_line_with_the_nearest_suite(project: pytest.Pytester) -> None:
    """Of a check's own suites too; nothing near: the bundled suites."""
    errors = errors_of(
        project,
        """\
models: {bf16: {path: ./m}, q4: {path: ./m}}
suites: [addition.jsonl]
checks:
  - compare: {baseline: bf16, test: q4}
    suites:
      - {suite: addition, limit: 1}
      - zzz.jsonl
""",
    )
    assert errors == [
        "infercheck.yaml:6: checks[0].suites[0].suite: suite 'addition' not found: it is "
        "neither a bundled suite nor an existing file (did you mean 'addition.jsonl'?)",
        "infercheck.yaml:7: checks[0].suites[1]: suite 'zzz.jsonl' not found: it is neither "
        f"a bundled suite nor an existing file (bundled suites: {BUNDLED})",
    ]


def test_no_pydantic_words(project: pytest.Pytester) -> None:
    """A validator's message without ``Value error,``; bounds and types in our words."""
    errors = errors_of(
        project,
        """\
models: {q4: {path: ./m}}
backends:
  gpu: {kind: vllm, url: 'http://127.0.0.1:8000', serve: 'vllm serve {model} --port {port}'}
suites: [addition.jsonl]
settings: {record: true, num_prompts: 0}
checks:
  - determinism: {target: q4, runs: many}
    min_determinism: -1
""",
    )
    assert errors == [
        "infercheck.yaml:3: backends.gpu: a vllm backend needs exactly one of 'url' (attach "
        "to a running server) or 'serve' (a command with {model} and {port} to start one)",
        "infercheck.yaml:5: settings.num_prompts: must be > 0, got 0",
        "infercheck.yaml:5: settings.record: recording is a command-line option: pytest "
        "--infercheck-record",
        "infercheck.yaml:7: checks[0].determinism.runs: expected an integer, got 'many'",
        "infercheck.yaml:8: checks[0].min_determinism: must be >= 0, got -1",
    ]


def test_a_llama_server_given_a_model_without_gguf_is_refused_at_collection(
    project: pytest.Pytester,
) -> None:
    """Attached or started, a llama-server is given a GGUF file: a hub repo alone cannot be
    served, so the file says what to add before anything runs."""
    errors = errors_of(
        project,
        """\
models:
  q4: {repo: org/q4-model}
backends:
  llama: {kind: llama-server, url: 'http://127.0.0.1:8080'}
suites: [addition.jsonl]
checks:
  - determinism: q4@llama
""",
    )
    assert errors == [
        "infercheck.yaml:2: models.q4: a llama-server backend loads a GGUF file: add "
        "`gguf: FILE.gguf` to model 'q4' (it has repo, which a llama-server cannot load)"
    ]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ATTACHED = """\
models: {{q4: {{gguf: ./m/q4.gguf}}}}
backends:
  llama:
    kind: llama-server
    url: 'http://127.0.0.1:{port}'
    retries: 0
    timeout: 1
suites: [{{suite: addition.jsonl, limit: 1}}]
checks:
  - determinism: q4@llama
"""


def failures_of(pytester: pytest.Pytester, port: int) -> list[str]:
    """The failure text of each item of a determinism check on a server at ``port``."""
    pytester.makefile(".yaml", infercheck=ATTACHED.format(port=port))
    result = pytester.runpytest("-q")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.outlines
    return [line for line in result.outlines if line.startswith("backend error:")]


def test_an_attached_server_not_running_is_named_by_its_url_and_line(
    project: pytest.Pytester,
) -> None:
    port = _free_port()
    failures = failures_of(project, port)
    assert (
        failures
        == [
            f"backend error: backend 'llama': cannot connect to http://127.0.0.1:{port}/health "
            "(GET /health, 1 attempt: ConnectError: All connection attempts failed): is the "
            f"server running and listening at http://127.0.0.1:{port}? (its url is written at "
            "infercheck.yaml:5: backends.llama.url)"
        ]
        * 2
    )  # the prompt's item and the aggregate


def test_an_attached_server_that_does_not_answer_is_named_by_its_url_and_line(
    project: pytest.Pytester,
) -> None:
    """A port that accepts connections and never answers: a read timeout."""
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        port = int(mute.getsockname()[1])
        failures = failures_of(project, port)
    assert (
        failures
        == [
            f"backend error: backend 'llama': no answer from http://127.0.0.1:{port}/health "
            "within 1s (GET /health, 1 attempt: ReadTimeout): is the server up and not stuck, "
            "or does it need a longer 'timeout'? (its url is written at infercheck.yaml:5: "
            "backends.llama.url)"
        ]
        * 2
    )


def test_the_errors_page_shows_what_the_plugin_says(project: pytest.Pytester) -> None:
    """docs/reference/errors.md's example file, collected: the page's output, line for
    line."""
    page = (Path(__file__).parents[2] / "docs" / "reference" / "errors.md").read_text()
    blocks = dict(re.findall(r"<!-- errors-example: (\S+) -->\n```text\n(.*?)```", page, re.S))
    assert errors_of(project, blocks["infercheck.yaml"]) == blocks["output"].splitlines()


def test_a_gate_never_measured_is_said_with_the_files_other_mistakes(
    project: pytest.Pytester,
) -> None:
    """A determinism check's logprob gate on a vllm-mlx server (which returns no logprobs)
    is refused in the same run as a misspelt key and an unknown suite."""
    errors = errors_of(
        project,
        """\
models: {q4: {path: ./m}}
backends:
  vmlx: {kind: vllm-mlx, url: 'http://127.0.0.1:8000'}
suites: [adition]
settings: {num_promts: 5}
checks:
  - determinism: q4@vmlx
    max_logprob_drift: 0.0
""",
    )
    assert errors == [
        "infercheck.yaml:4: suites[0]: suite 'adition' not found: it is neither a bundled "
        "suite nor an existing file (did you mean 'addition.jsonl'?)",
        "infercheck.yaml:5: settings.num_promts: unknown key 'num_promts' (did you mean "
        "'num_prompts'?)",
        "infercheck.yaml:8: checks[0].max_logprob_drift: not measured on any item: backend "
        "'vmlx' (vllm-mlx) returns no logprobs",
    ]
