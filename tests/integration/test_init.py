"""``pytest-infercheck init`` against real engines: the files it writes run at once.

- ``--llama-server URL`` on the llama-server of the integration conftest (``llama_url``: the
  tiny adder's f32 GGUF, one slot of 64 tokens, the model's whole context). The determinism
  suite's first prompts (up to 162 tokens) cannot fit, so init writes its short prompts and
  ``max_tokens`` 35 (64 - 25 tokens of the longest short prompt with BOS - 4), and ``pytest``
  in that folder passes: 10 determinism items and the aggregate, with no pytest-asyncio
  deprecation warning (the written ``pytest.ini`` sets the loop scope).
- ``--mlx PATH`` on the tiny adder's bf16 folder: in-process, the determinism suite as it is.
- Run a second time, init refuses to overwrite (exit 2, the files untouched); ``--force``
  writes them again.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import REPO


def _init(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest_infercheck.cli", "init", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
        timeout=120,
    )


def _pytest_in(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider"],
        capture_output=True,
        text=True,
        cwd=folder,
        check=False,
        timeout=600,
    )


def test_init_llama_server_writes_files_that_pass(llama_url: str, tmp_path: Path) -> None:
    out = tmp_path / "project"
    done = _init("--llama-server", llama_url, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert f"llama-server at {llama_url} serving " in done.stdout
    assert "vocabulary 259 ids; context 64 tokens per slot" in done.stdout
    assert "init wrote prompts.jsonl (10 short prompts) and max_tokens 35" in done.stdout
    matrix = yaml.safe_load((out / "infercheck.yaml").read_text())
    assert matrix["backends"] == {"llama": {"kind": "llama-server", "url": llama_url}}
    assert matrix["models"]["mine"]["gguf"].endswith("tiny-adder-f32.gguf")
    assert matrix["suites"] == ["prompts.jsonl"]
    assert matrix["settings"] == {"num_prompts": 10, "max_tokens": 35}

    run = _pytest_in(out)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text
    assert "11 passed" in text
    assert "determinism(mine)  prompts  mine@llama" in text
    assert "PytestDeprecationWarning" not in text and "warnings summary" not in text

    again = _init("--llama-server", llama_url, "--out", str(out))
    assert again.returncode == 2
    assert "exist: not overwritten (--force overwrites)" in again.stderr
    (out / "infercheck.yaml").write_text("# mine\n")
    forced = _init("--llama-server", llama_url, "--out", str(out), "--force")
    assert forced.returncode == 0, forced.stderr
    assert "determinism" in (out / "infercheck.yaml").read_text()


def test_init_mlx_writes_files_that_pass(tiny_models: dict[str, Path], tmp_path: Path) -> None:
    pytest.importorskip("mlx_lm")
    out = tmp_path / "project"
    done = _init("--mlx", str(tiny_models["bf16"]), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "teacher-forced full-vocabulary KL (in-process logits)" in done.stdout
    matrix = yaml.safe_load((out / "infercheck.yaml").read_text())
    assert matrix["backends"] == {"local": {"kind": "mlx-lm"}}
    assert matrix["models"] == {"mine": {"path": str(tiny_models["bf16"].resolve())}}
    assert matrix["suites"] == ["determinism"]

    run = _pytest_in(out)
    text = run.stdout + run.stderr
    assert run.returncode == 0, text
    assert "11 passed" in text
    assert "determinism(mine)  determinism  mine@local" in text
    assert "PytestDeprecationWarning" not in text
