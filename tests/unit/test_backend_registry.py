"""The backend registry and the optional capabilities: every registry line builds its kind,
the matrix refuses a kind the registry does not know (naming the known ones, at the line),
reading the registry's facts loads no backend module, and the capability Protocols tell an
in-process model that steps from a server (no model loaded, no server asked)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pytest_infercheck.backends import BackendError, create_backend
from pytest_infercheck.backends.capabilities import ModelFolder, Stepping, TemplatedText
from pytest_infercheck.backends.kind import BackendKind
from pytest_infercheck.backends.registry import (
    BACKEND_NAMES,
    BACKENDS,
    SERVER_KINDS,
    backend_spec,
)
from pytest_infercheck.config import load_matrix
from pytest_infercheck.yamlpos import SourceError

MATRIX = """\
models: {a: {path: x}}
backends:
  local: {kind: mlx-lm}
  b: {kind: tensorrt}
suites: [r]
checks: [{compare: {baseline: a@local, test: a@local}}]
"""


def test_a_kind_not_in_the_registry_is_an_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX)
    with pytest.raises(SourceError) as caught:
        load_matrix(path)
    assert caught.value.line == 4
    known = ", ".join(BACKEND_NAMES)
    assert str(caught.value) == (
        f"{path}:4: backends.b.kind: unknown backend kind 'tensorrt' (known kinds: {known})"
    )
    assert known == "mlx-lm, openai, vllm, vllm-mlx, sglang, llama-server, ollama"


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_each_registry_line_builds_a_backend_of_its_kind(kind: BackendKind) -> None:
    """The line's module has ``create`` and builds the kind it names (nothing is loaded or
    contacted: mlx-lm loads its model, and a server is asked, on first use)."""
    name = kind.name
    entry = {"kind": name, **({"url": "http://127.0.0.1:9"} if name in SERVER_KINDS else {})}
    backend = create_backend("b", backend_spec(entry), "/nonexistent/model", None)
    assert backend.kind == name and backend.name == "b"


def test_reading_the_registry_imports_no_backend_module() -> None:
    """Validating backends, the shorthand and the server kinds read the registry's facts
    only: no backend module (httpx, mlx, numpy) is imported."""
    code = (
        "import sys\n"
        "from pytest_infercheck.backends.registry import backend_spec\n"
        "from pytest_infercheck.config import ModelSpec\n"
        "backend_spec({'kind': 'llama-server', 'url': 'http://x'})\n"
        "backend_spec({'kind': 'mlx-lm'})\n"
        "ModelSpec.model_validate('ollama:qwen3:4b')\n"
        "loaded = {m for m in sys.modules if m.startswith('pytest_infercheck.backends.')}\n"
        "print(sorted(loaded | ({'httpx', 'mlx'} & set(sys.modules))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    light = ("base", "kind", "options", "registry", "serve_command", "spec")
    loaded = [f"pytest_infercheck.backends.{m}" for m in light]
    assert out.stdout.strip() == str(loaded)


def test_capabilities_are_told_apart_without_loading_a_model() -> None:
    from pytest_infercheck.backends import mlx_lm
    from pytest_infercheck.backends.http import HttpSettings
    from pytest_infercheck.backends.llama_server import LlamaServerBackend
    from pytest_infercheck.backends.openai_compat import OpenAICompatBackend

    spec = mlx_lm.MlxModelSpec("/nonexistent/model")
    local = mlx_lm.MlxLmBackend("local", spec)
    settings = HttpSettings("http://127.0.0.1:9")
    server = OpenAICompatBackend("server", settings, model="/nonexistent/model")
    llama = LlamaServerBackend("llama", settings)

    assert isinstance(local, Stepping)
    assert not isinstance(local, ModelFolder) and not isinstance(local, TemplatedText)
    assert not isinstance(server, Stepping) and not isinstance(llama, Stepping)
    assert isinstance(server, TemplatedText) and isinstance(server, ModelFolder)
    assert server.model_folder() is None  # the model is not a folder here
    assert not isinstance(llama, ModelFolder)
    assert spec not in mlx_lm._LOADED  # telling them apart loaded nothing


def test_teacher_forced_scoring_is_a_capability_the_backend_defines() -> None:
    """Scoring teacher-forced is offered by defining ``score`` / ``score_top_k`` (the
    Protocols of :mod:`.capabilities`), no longer a default of every backend that raises;
    the generation cache refuses a backend without it, naming it."""
    from pytest_infercheck.backends import mlx_lm
    from pytest_infercheck.backends.capabilities import Scoring, TopKScoring
    from pytest_infercheck.backends.http import HttpSettings
    from pytest_infercheck.backends.llama_server import LlamaServerBackend
    from pytest_infercheck.backends.ollama import OllamaBackend
    from pytest_infercheck.backends.openai_compat import OpenAICompatBackend
    from pytest_infercheck.backends.sglang import SglangBackend
    from pytest_infercheck.backends.vllm import VllmBackend
    from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget

    settings = HttpSettings("http://127.0.0.1:9")
    offered = {
        "mlx-lm": mlx_lm.MlxLmBackend("a", mlx_lm.MlxModelSpec("/nonexistent")),
        "llama-server": LlamaServerBackend("b", settings),
        "vllm": VllmBackend("c", settings, model="m"),
        "sglang": SglangBackend("d", settings, model="m"),
        "openai": OpenAICompatBackend("e", settings, model="m"),
        "ollama": OllamaBackend("f", settings, model="m", chat=True),
    }
    assert {
        k: (isinstance(b, Scoring), isinstance(b, TopKScoring)) for k, b in offered.items()
    } == {
        "mlx-lm": (True, False),
        "llama-server": (True, True),
        "vllm": (True, True),
        "sglang": (True, True),
        "openai": (False, False),
        "ollama": (False, False),
    }
    cache = GenerationCache()
    try:
        target = ResolvedTarget("m@e", ("e",), offered["openai"])
        with pytest.raises(BackendError, match=r"backend 'e' \(openai\) cannot score teacher"):
            cache.score(target, [1], [2])
        with pytest.raises(BackendError, match=r"backend 'e' \(openai\) cannot score top-k"):
            cache.score_top_k(target, [1], [2])
    finally:
        cache.close()
