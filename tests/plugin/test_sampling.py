"""The ``sampling`` kind's collection: what the matrix alone shows it cannot do is an error
at its line (no server is started)."""

from __future__ import annotations

import pytest

MATRIX = """\
models: {{adder: {{path: ./m}}}}
backends:
  vmlx: {{kind: vllm-mlx, url: 'http://127.0.0.1:8000'}}
  oai: {{kind: openai, url: 'http://127.0.0.1:8001', logprobs: false}}
suites: [sampling]
checks:
  - sampling: {{target: {target}}}
    params:
      - {{temperature: 1.0, top_k: 3}}
    seed: true
"""


def test_a_seed_the_engine_does_not_take_is_refused_at_its_line(
    pytester: pytest.Pytester,
) -> None:
    pytester.mkdir("m")
    pytester.makefile(".yaml", infercheck=MATRIX.format(target="adder@vmlx"))
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*infercheck.yaml:7: checks[[]0].alpha: not measured on any item: backend 'vmlx' "
            "(vllm-mlx) returns no logprobs (name a reference: that does)",
            "*infercheck.yaml:10: checks[[]0].seed: backend 'vmlx' (vllm-mlx) does not take "
            "seed (taken by *)",
        ]
    )


def test_no_logprobs_and_no_reference_is_an_error(pytester: pytest.Pytester) -> None:
    pytester.mkdir("m")
    pytester.makefile(".yaml", infercheck=MATRIX.format(target="adder@oai"))
    result = pytester.runpytest("--collect-only", "-q")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*checks[[]0].alpha: not measured on any item: *logprobs: false*"])
