"""``suite: context-ladder`` through pytest: generated at collection from the check's model
folder (the tiny adder: original context 64, no chat template, so its text is counted), and
an error at the suite's line when no model of the check has a folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REPO

ADDER = REPO / "examples" / "models" / "tiny-adder"


def test_ladder_items_are_generated_from_the_model(pytester: pytest.Pytester) -> None:
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  adder: {{path: '{ADDER}'}}
backends:
  a: {{kind: mlx-lm, dtype: float32}}
  b: {{kind: mlx-lm, dtype: float16}}
suites: [context-ladder]
checks:
  - diff: {{model: adder, backends: [a, b]}}
    name: ladder
""",
    )
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    ids = [line for line in result.stdout.lines if "::context-ladder::" in line]
    assert [i.split("::")[-1] for i in ids] == [
        "len-0.5x-0[b]",
        "len-1x-0[b]",
        "len-2x-0[b]",
        "len-4x-0[b]",
        "aggregate",
    ]


def test_a_check_without_a_model_folder_is_an_error_at_the_suite(
    pytester: pytest.Pytester, tmp_path: Path
) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"")
    pytester.makefile(
        ".yaml",
        infercheck=f"""\
models:
  m: {{gguf: '{gguf}'}}
backends:
  x: {{kind: llama-server, url: 'http://127.0.0.1:9'}}
  y: {{kind: llama-server, url: 'http://127.0.0.1:8'}}
suites: [determinism]
checks:
  - diff: {{model: m, backends: [x, y]}}
    suites: [context-ladder]
""",
    )
    result = pytester.runpytest_subprocess("--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(
        [
            "*infercheck.yaml:9: checks?0?.suites?0?: context-ladder is made from a "
            "model's config.json and tokenizer.json*"
        ]
    )
