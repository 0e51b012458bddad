"""The matrix schema: valid files load; every error names the file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_infercheck.config import load_matrix
from pytest_infercheck.yamlpos import SourceError, format_loc

VALID = """\
models:
  bf16: {path: ./m/bf16}
  q4:
    path: ./m/q4
    quantization: 4bit
suites: [reasoning, {suite: mine.jsonl, limit: 5}]
checks:
  - compare: {baseline: bf16, test: q4@local}
    max_kl: 0.05
    flips: {max_rate: 0.1, confidence: 0.9}
  - sweep: {baseline: bf16@local, models: [q4]}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "infercheck.yaml"
    path.write_text(text)
    return path


def error_of(tmp_path: Path, text: str) -> SourceError:
    with pytest.raises(SourceError) as info:
        load_matrix(write(tmp_path, text))
    return info.value


def test_valid_matrix_loads_with_defaults(tmp_path: Path) -> None:
    loaded = load_matrix(write(tmp_path, VALID))
    matrix = loaded.matrix
    assert list(matrix.models) == ["bf16", "q4"]
    assert matrix.backends["local"].kind == "mlx-lm"  # the embedded default backend
    assert [s.suite for s in matrix.suites] == ["reasoning", "mine.jsonl"]
    assert matrix.suites[1].limit == 5
    assert matrix.checks[0].kind == "compare"
    assert matrix.checks[0].flips.max_rate == 0.1
    assert matrix.checks[0].flips.fail_item_on == "correct_to_wrong"
    assert matrix.checks[1].kind == "sweep"
    source, revision = loaded.model_source("q4")
    assert source == str((tmp_path / "m" / "q4").resolve()) and revision is None
    assert loaded.target("bf16", ("x",)).label == "bf16@local"


@pytest.mark.parametrize(
    ("text", "line", "fragment"),
    [
        # YAML syntax error: the unclosed flow mapping is reported where the parser stops.
        ("models:\n  bf16: {path: x\nsuites: [a]\n", 3, "invalid YAML"),
        # Unknown model in a check: the line of the 'test' key.
        (VALID.replace("test: q4@local", "test: q5@local"), 8, "unknown model 'q5'"),
        # Unknown backend.
        (VALID.replace("test: q4@local", "test: q4@gpu"), 8, "unknown backend 'gpu'"),
        # Wrong type deep inside: flips.max_rate on line 10.
        (VALID.replace("max_rate: 0.1", "max_rate: lots"), 10, "checks[0].flips.max_rate"),
        # Unknown key in a model (line 5 holds 'quantisation').
        (
            VALID.replace("quantization", "quantisation"),
            5,
            "models.q4.quantisation: unknown key 'quantisation' (did you mean 'quantization'?)",
        ),
        # A misspelt threshold names the nearest one.
        (
            VALID.replace("max_kl: 0.05", "max_kll: 0.05"),
            9,
            "checks[0].max_kll: unknown key 'max_kll' (did you mean 'max_kl'?)",
        ),
        # Nothing near: the keys the mapping accepts.
        (
            VALID.replace("max_rate: 0.1", "zzz: 0.1"),
            10,
            "unknown key 'zzz' (expected one of: confidence, fail_item_on, gate, max_rate)",
        ),
        # A check with two kinds.
        (
            VALID.replace("    max_kl: 0.05", "    sweep: {baseline: bf16, models: [q4]}"),
            8,
            "exactly one of compare, sweep",
        ),
        # Unknown backend kind.
        (
            "models: {a: {path: x}}\nbackends:\n  b: {kind: tensorrt}\nsuites: [r]\n"
            "checks: [{compare: {baseline: a, test: a}}]\n",
            3,
            "backends.b.kind",
        ),
        # A repeated key (PyYAML alone would silently keep the last one).
        (VALID.replace("  q4:\n", "  bf16: {path: x}\n  q4:\n"), 3, "duplicate key 'bf16'"),
        # A server backend without a url, and an in-process one with a url.
        (
            "models: {a: {path: x}}\nbackends:\n  v: {kind: vllm-mlx}\nsuites: [r]\n"
            "checks: [{compare: {baseline: a, test: a}}]\n",
            3,
            "a vllm-mlx backend needs exactly one of 'url'",
        ),
        (
            "models: {a: {path: x}}\nbackends:\n  m: {kind: mlx-lm, url: 'http://x'}\n"
            "suites: [r]\nchecks: [{compare: {baseline: a, test: a}}]\n",
            3,
            "remove 'url'",
        ),
        # Missing required section.
        ("models: {a: {path: x}}\nsuites: [r]\n", 1, "checks"),
        # A model with neither path nor repo.
        (
            "models:\n  a: {quantization: 4bit}\nsuites: [r]\n"
            "checks: [{compare: {baseline: a, test: a}}]\n",
            2,
            "give one of 'path', 'repo', 'gguf' or 'served_name'",
        ),
    ],
)
def test_errors_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, fragment: str
) -> None:
    err = error_of(tmp_path, text)
    assert err.line == line, str(err)
    assert fragment in str(err)
    assert str(err).startswith(f"{tmp_path / 'infercheck.yaml'}:{line}: ")


def test_target_without_backend_is_ambiguous_with_two_backends(tmp_path: Path) -> None:
    text = (
        VALID.replace(
            "suites:", "backends:\n  a: {kind: mlx-lm}\n  b: {kind: mlx-lm, chat: false}\nsuites:"
        )
        .replace("test: q4@local", "test: q4@a")
        .replace("bf16@local", "bf16@a")
    )
    err = error_of(tmp_path, text)
    assert "needs '@backend'" in str(err) and "a, b" in str(err)


def test_empty_file_is_an_error(tmp_path: Path) -> None:
    assert error_of(tmp_path, "").line == 1


def test_format_loc() -> None:
    assert format_loc(("checks", 0, "compare", "test")) == "checks[0].compare.test"
    assert format_loc(()) == "(document)"


def test_server_backend_options(tmp_path: Path) -> None:
    text = (
        VALID.replace("baseline: bf16,", "baseline: bf16@local,")
        .replace("[q4]", "[q4@local]")
        .replace(
            "suites:",
            "backends:\n  local: {kind: mlx-lm}\n  srv: {kind: openai, url: 'http://127.0.0.1:8080',"
            " chat: false, api_key_env: MY_KEY, max_concurrency: 8, timeout: 30}\nsuites:",
        )
    )
    spec = load_matrix(write(tmp_path, text)).matrix.backends["srv"]
    assert (spec.kind, spec.url, spec.chat, spec.api_key_env) == (
        "openai",
        "http://127.0.0.1:8080",
        False,
        "MY_KEY",
    )
    assert spec.max_concurrency == 8 and spec.timeout == 30


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("mlx:./models/tiny", {"path": "./models/tiny"}),
        ("mlx:mlx-community/Qwen3-4B-4bit", {"repo": "mlx-community/Qwen3-4B-4bit"}),
        ("gguf:./tiny.gguf", {"gguf": "./tiny.gguf"}),
        ("./weights/tiny-q4.gguf", {"gguf": "./weights/tiny-q4.gguf"}),
        ("ollama:llama3.2:1b", {"served_name": "llama3.2:1b"}),
        ("llama3.2:1b", {"served_name": "llama3.2:1b"}),
        ("openai:gpt-4o-mini", {"served_name": "gpt-4o-mini"}),
        ("vllm-mlx:./models/tiny", {"path": "./models/tiny"}),
        ("mlx-community/Llama-3.2-1B-4bit", {"repo": "mlx-community/Llama-3.2-1B-4bit"}),
        ("./models/tiny", {"path": "./models/tiny"}),
    ],
)
def test_model_shorthand_like_infer_check(spec: str, parsed: dict[str, str]) -> None:
    from pytest_infercheck.config import parse_model_shorthand

    assert parse_model_shorthand(spec) == parsed


def test_each_backend_kind_gets_its_artifact(tmp_path: Path) -> None:
    text = VALID.replace(
        "  bf16: {path: ./m/bf16}", "  bf16: {path: ./m/bf16, gguf: ./m/bf16.gguf}"
    ).replace("quantization: 4bit", "quantization: 4bit\n  named: 'ollama:qwen3:4b'")
    loaded = load_matrix(write(tmp_path, text))
    assert loaded.model_source("bf16", "llama-server") == (str(tmp_path / "m/bf16.gguf"), None)
    assert loaded.model_source("bf16", "mlx-lm") == (str(tmp_path / "m/bf16"), None)
    assert loaded.model_source("named", "openai") == ("qwen3:4b", None)
    with pytest.raises(SourceError, match=r"add `gguf: FILE\.gguf` to model 'q4'"):
        loaded.model_source("q4", "llama-server")
    with pytest.raises(SourceError, match="needs 'path' or 'repo': add one to model 'named'"):
        loaded.model_source("named", "mlx-lm")


ENGINE = """\
models:
  q4: {path: ./m/q4}
suites: [reasoning]
checks:
"""


@pytest.mark.parametrize(
    ("check", "line", "message"),
    [
        (
            "  - stress: {target: q4, levels: [1, 2]}\n    max_kl: 0.1\n",
            6,
            "checks[0].max_kl: stress does not use max_kl (compare, sweep, diff do)",
        ),
        (
            "  - determinism: {target: q4}\n    min_same_top: 0.9\n",
            6,
            "checks[0].min_same_top: determinism does not use min_same_top (compare, sweep, "
            "diff do)",
        ),
        (
            "  - batch-invariance: q4\n    min_determinism: 0.9\n",
            6,
            "checks[0].min_determinism: batch-invariance does not use min_determinism "
            "(determinism does)",
        ),
    ],
)
def test_a_threshold_the_kind_does_not_use_is_an_error_at_its_line(
    tmp_path: Path, check: str, line: int, message: str
) -> None:
    err = error_of(tmp_path, ENGINE + check)
    assert (err.line, err.reason) == (line, message)


def test_a_threshold_another_kind_of_the_file_uses_is_refused_too(tmp_path: Path) -> None:
    """With a compare in the file, ``max_kl`` is a key the entry model knows: the stress
    entry that writes it is refused all the same."""
    text = ENGINE + (
        "  - compare: {baseline: q4, test: q4}\n    max_kl: 0.1\n"
        "  - stress: {target: q4, levels: [1]}\n    max_kl: 0.1\n"
    )
    err = error_of(tmp_path, text)
    assert (err.line, err.reason) == (
        8,
        "checks[1].max_kl: stress does not use max_kl (compare, sweep, diff do)",
    )


def test_the_thresholds_a_check_records_are_its_kinds_only(tmp_path: Path) -> None:
    loaded = load_matrix(write(tmp_path, ENGINE + "  - determinism: {target: q4}\n"))
    assert loaded.matrix.checks[0].thresholds() == {
        "max_error_rate": 0.0,
        "tie_margin": 0.01,
        "fail_on": "any",
    }


def test_every_error_of_a_file_is_reported_at_once(tmp_path: Path) -> None:
    text = """\
models:
  q4: {path: ./m/q4}
backends:
  local: {kind: mlx-lm, dtyp: float32}
suites: [reasoning]
checks:
  - determinism: {target: q4, runz: 3}
    max_kl: 0.1
  - stress: {target: q5}
"""
    err = error_of(tmp_path, text)
    found = [(e.line, e.reason) for e in err.each()]
    assert found[:2] == [
        (4, "backends.local.dtyp: unknown key 'dtyp' (did you mean 'dtype'?)"),
        (7, "checks[0].determinism.runz: unknown key 'runz' (did you mean 'runs'?)"),
    ]
    assert (8, "checks[0].max_kl: determinism does not use max_kl (compare, sweep, diff do)") in (
        found
    )
    assert "(and" not in str(err)
    assert str(err).count("infercheck.yaml:") == len(found) >= 3


SERVE_MATRIX = """\
models: {{a: {{path: x}}}}
backends:
  local: {{kind: mlx-lm}}
  vllm:
    kind: openai
    serve: |-
      {serve}
suites: [r]
checks: [{{compare: {{baseline: a@local, test: a@vllm}}}}]
"""


@pytest.mark.parametrize(
    ("serve", "fragment"),
    [
        # A misspelt placeholder would reach the server as it is.
        ("srv --model {modle} --port {port}", "unknown placeholder {modle}"),
        # The plugin picks the port: a command without {port} is never waited on right.
        ("srv --model {model}", "it must contain {port}"),
        # An unclosed quote cannot be split into arguments.
        ("srv --port {port} --x '{model}", "cannot split it into arguments"),
    ],
)
def test_a_wrong_serve_command_is_an_error_at_its_line_naming_the_backend(
    tmp_path: Path, serve: str, fragment: str
) -> None:
    err = error_of(tmp_path, SERVE_MATRIX.format(serve=serve))
    assert err.line == 6, str(err)
    assert "backends.vllm.serve" in str(err) and fragment in str(err)


def test_a_serve_command_holding_json_or_shell_braces_is_valid(tmp_path: Path) -> None:
    """Only {model} and {port} are placeholders: JSON objects and ${VAR} pass as they are."""
    serve = """srv {model} --port {port} --spec '{"method": "ngram", "n": 3}' --x ${HOME}"""
    text = SERVE_MATRIX.format(serve=serve)
    spec = load_matrix(write(tmp_path, text)).matrix.backends["vllm"]
    assert spec.serve is not None and '{"method": "ngram"' in spec.serve


def test_logprobs_false_on_a_backend_that_does_not_apply_it_is_an_error(tmp_path: Path) -> None:
    """``logprobs: false`` turns off the OpenAI-compatible logprob negotiation; on mlx-lm,
    llama-server or SGLang nothing would read it, so it is refused at its backend, not
    ignored."""
    matrix = """\
models: {a: {path: x, gguf: x.gguf}}
backends:
  local: {kind: mlx-lm}
  srv: {kind: %s, url: 'http://127.0.0.1:1', logprobs: false}
suites: [r]
checks: [{compare: {baseline: a@local, test: a@srv}}]
"""
    for kind in ("llama-server", "sglang"):  # sglang's native /generate never read it
        err = error_of(tmp_path, matrix % kind)
        assert err.line == 4, str(err)
        assert str(err).endswith(
            "backends.srv.logprobs: logprobs is an option of openai, vllm and vllm-mlx "
            f"backends, not of a {kind} backend"
        )
    spec = load_matrix(write(tmp_path, matrix % "openai")).matrix.backends["srv"]
    assert spec.logprobs is False
