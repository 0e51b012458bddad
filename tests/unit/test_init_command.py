"""``pytest-infercheck init``: the probe-to-YAML decision (pure), the context fitting (values
by hand), and its refusals (a URL nothing listens on, a non-URL, a missing folder, no engine
and no terminal, existing files). The runs against real engines are in
tests/integration/test_init.py."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from pytest_infercheck.cli import main
from pytest_infercheck.config import load_matrix
from pytest_infercheck.scaffold.fit import fitted_max_tokens, short_suite_text
from pytest_infercheck.scaffold.matrix_text import (
    PYTEST_INI,
    Choices,
    matrix_text,
    uncommented,
)
from pytest_infercheck.scaffold.probe import Probed

LLAMA = Probed(
    kind="llama-server",
    url="http://127.0.0.1:8080",
    model=("gguf", "/models/m.gguf"),
    vocab=300,
    context=4096,
    logprobs=True,
    tokenizer=True,
    scoring="full",
    facts=("llama-server at http://127.0.0.1:8080 serving /models/m.gguf",),
)
VLLM_TOP_K = Probed(
    kind="vllm",
    url="http://127.0.0.1:8000",
    model=("path", "/models/my-model"),
    model_name="mine-served",
    logprobs=True,
    tokenizer=True,
    scoring="top-k",
    top_k=20,
)
OPENAI = Probed(
    kind="openai", url="http://127.0.0.1:8000", model=("served_name", "m"), logprobs=True
)
OPENAI_TEXT = Probed(
    kind="openai", url="http://127.0.0.1:8000", model=("served_name", "m"), logprobs=False
)


def _gates(text: str) -> dict[str, object]:
    """The diff check of the uncommented matrix."""
    checks = yaml.safe_load(uncommented(text))["checks"]
    (diff,) = [c for c in checks if "diff" in c]
    return dict(diff)


def test_a_scoring_server_gets_kl_gates_and_its_determinism_check() -> None:
    text = matrix_text(LLAMA, "pytest-infercheck init --llama-server http://127.0.0.1:8080")
    data = yaml.safe_load(text)
    assert data["models"] == {"mine": {"gguf": "/models/m.gguf"}}
    assert data["backends"] == {"llama": {"kind": "llama-server", "url": "http://127.0.0.1:8080"}}
    assert data["checks"] == [
        {"determinism": {"target": "mine@llama", "runs": 3}, "min_determinism": 1.0}
    ]
    assert data["settings"] == {"num_prompts": 10, "max_tokens": 64}
    assert "#   - llama-server at http://127.0.0.1:8080 serving /models/m.gguf" in text
    diff = _gates(text)
    assert diff["diff"] == {"model": "mine", "backends": ["llama", "other"]}
    assert diff["max_kl"] == 0.01 and diff["max_mean_kl"] == 0.005
    assert "exact" in text and "lower bound" not in text


def test_a_top_k_server_gets_kl_gates_said_to_be_on_a_bound() -> None:
    text = matrix_text(VLLM_TOP_K, "init")
    data = yaml.safe_load(text)
    assert data["backends"]["vllm"] == {
        "kind": "vllm",
        "url": "http://127.0.0.1:8000",
        "model_name": "mine-served",
    }
    assert data["models"] == {"mine": {"path": "/models/my-model"}}
    assert "max_kl" in _gates(text)
    assert "top 20 and a tail bucket" in text and "lower bound" in text


def test_an_openai_server_gets_no_kl_gate_and_says_what_it_gives_up() -> None:
    text = matrix_text(OPENAI, "init")
    diff = _gates(text)
    assert "max_kl" not in diff and "max_mean_kl" not in diff
    assert diff["min_similarity"] == 0.9
    assert "What an OpenAI-compatible server gives up: no teacher forcing" in text
    assert yaml.safe_load(text)["models"] == {"mine": {"served_name": "m"}}

    bare = matrix_text(OPENAI_TEXT, "init")
    assert "max_kl" not in _gates(bare)
    assert "no logprobs came back, so no KL" in bare


def test_choices_reach_the_matrix() -> None:
    text = matrix_text(LLAMA, "init", Choices("reasoning", 20, 128, 5))
    data = yaml.safe_load(text)
    assert data["suites"] == ["reasoning"]
    assert data["settings"] == {"num_prompts": 20, "max_tokens": 128}
    assert data["checks"][0]["determinism"]["runs"] == 5


@pytest.mark.parametrize("probed", [LLAMA, VLLM_TOP_K, OPENAI, OPENAI_TEXT])
def test_the_matrix_loads_as_written_and_uncommented(probed: Probed, tmp_path: Path) -> None:
    """The plugin's loader takes the file as written and with its diff made live."""
    for name, text in (("as-written", matrix_text(probed, "init")),):
        path = tmp_path / f"infercheck-{name}.yaml"
        path.write_text(text)
        assert [c.kind for c in load_matrix(path).matrix.checks] == ["determinism"]
    live = tmp_path / "infercheck-live.yaml"
    live.write_text(uncommented(matrix_text(probed, "init")))
    assert [c.kind for c in load_matrix(live).matrix.checks] == ["determinism", "diff"]


def test_fitting_max_tokens_to_the_context() -> None:
    # room = 64 - 20 - 4 = 40: 64 asked becomes 40; 32 asked stays 32.
    assert fitted_max_tokens([12, 20, 7], 64, 64, 4) == 40
    assert fitted_max_tokens([12, 20, 7], 64, 32, 4) == 32
    # room = 64 - 45 - 4 = 15 < 16: nothing fits.
    assert fitted_max_tokens([45], 64, 64, 4) is None
    assert fitted_max_tokens([44], 64, 64, 4) == 16
    assert len(short_suite_text().splitlines()) == 10


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_a_url_nothing_listens_on_is_named_with_a_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["init", "--llama-server", url, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"pytest-infercheck init: error: cannot reach {url} (GET /health: " in err
    assert "is llama-server running there? Start it (e.g. `llama-server -m model.gguf" in err
    assert not list(tmp_path.iterdir())  # nothing written

    assert main(["init", "--vllm", url, "--out", str(tmp_path)]) == 2
    assert "is a vLLM server running there? Start it (e.g. `vllm serve" in capsys.readouterr().err


def test_other_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["init", "--vllm", "localhost:8000", "--out", str(tmp_path)]) == 2
    assert "'localhost:8000' is not a URL: give the server's address, e.g. --vllm http://" in (
        capsys.readouterr().err
    )
    missing = tmp_path / "no-such-model"
    assert main(["init", "--mlx", str(missing), "--out", str(tmp_path)]) == 2
    assert f"{missing} is not a folder: give --mlx the folder of an mlx" in capsys.readouterr().err
    assert main(["init", "--out", str(tmp_path)]) == 2  # pytest's stdin is no terminal
    assert "give the engine: --vllm URL, --llama-server URL, --openai URL or --mlx PATH" in (
        capsys.readouterr().err
    )
    assert not list(tmp_path.iterdir())


def test_existing_files_are_not_overwritten_without_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n# mine\n")
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["init", "--llama-server", url, "--out", str(tmp_path)]) == 2
    assert f"{tmp_path / 'pytest.ini'} exists: not overwritten (--force overwrites)" in (
        capsys.readouterr().err
    )
    assert (tmp_path / "pytest.ini").read_text() == "[pytest]\n# mine\n"
    # With --force the probe runs (and here fails: nothing written either way).
    assert main(["init", "--llama-server", url, "--out", str(tmp_path), "--force"]) == 2
    assert "cannot reach" in capsys.readouterr().err


def test_the_pytest_ini_sets_the_loop_scope() -> None:
    assert "asyncio_default_fixture_loop_scope = function" in PYTEST_INI.splitlines()


def test_the_documented_refusal_is_what_init_prints(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reference/cli.md shows the refusal for a vLLM that is not there, word for word
    (its URL aside)."""
    page = (Path(__file__).parents[2] / "docs" / "reference" / "cli.md").read_text()
    (shown,) = [line for line in page.splitlines() if line.startswith("pytest-infercheck init:")]
    url = f"http://127.0.0.1:{_free_port()}"
    assert main(["init", "--vllm", url, "--out", str(tmp_path)]) == 2
    printed = capsys.readouterr().err.strip()
    assert printed == shown.replace("http://127.0.0.1:8000", url, 1)
