"""stress's ``beside`` (adapter isolation) refused at collection, each at its line:
an in-process target (every model its own engine), a ``beside`` entry naming a backend, an
unknown model, a beside model whose adapter the backend cannot apply."""

from __future__ import annotations

import pytest

SUITE = '{"id": "a1", "prompt": "1+1=", "answer": "2", "answer_kind": "number"}\n'


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "m").mkdir()
    (pytester.path / "lora").mkdir()
    pytester.makefile(".jsonl", addition=SUITE)
    return pytester


def errors_of(pytester: pytest.Pytester, text: str) -> list[str]:
    """The lines of the collection error of ``infercheck.yaml``."""
    pytester.makefile(".yaml", infercheck=text)
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED, result.outlines
    assert "Traceback" not in result.stdout.str()
    return [line for line in result.outlines if line.startswith("infercheck.yaml:")]


MODELS = """\
models:
  base: {path: ./m, gguf: ./m.gguf}
  tuned: {path: ./m, gguf: ./m.gguf, adapter: {path: ./lora, gguf: ./lora.gguf}}
"""


def test_beside_on_an_in_process_target_is_refused_at_its_line(project: pytest.Pytester) -> None:
    errors = errors_of(
        project,
        MODELS
        + """\
backends:
  mlx: {kind: mlx-lm}
suites: [addition.jsonl]
checks:
  - stress:
      target: base@mlx
      beside: [tuned]
""",
    )
    assert errors == [
        "infercheck.yaml:10: checks[0].stress.beside: beside needs a server backend "
        "(openai, vllm, vllm-mlx, sglang, llama-server, ollama), where one engine serves every "
        "model: base@mlx runs in-process (mlx-lm), each model its own engine"
    ]


def test_beside_names_models_of_the_targets_backend(project: pytest.Pytester) -> None:
    errors = errors_of(
        project,
        MODELS
        + """\
backends:
  llama: {kind: llama-server, url: 'http://127.0.0.1:9'}
  ollama: {kind: ollama, url: 'http://127.0.0.1:9'}
suites: [addition.jsonl]
checks:
  - stress: {target: base@llama, beside: [tuned@llama]}
  - stress: {target: base@llama, beside: [tuner]}
  - stress: {target: base@ollama, beside: [tuned]}
""",
    )
    assert errors == [
        "infercheck.yaml:9: checks[0].stress.beside: beside names models served by the "
        "target's backend (MODEL, not MODEL@BACKEND)",
        "infercheck.yaml:10: checks[1].stress.beside[0]: unknown model 'tuner' (did you mean "
        "'tuned'?)",
        "infercheck.yaml:11: checks[2].stress.beside[0]: model 'tuned' has a LoRA adapter, "
        "which a ollama backend cannot apply (it would answer with the base model): backends "
        "that apply adapters are mlx-lm, vllm, llama-server",
    ]
