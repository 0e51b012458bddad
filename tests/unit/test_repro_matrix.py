"""A repro bundle's matrix loads again, with the same backends: each backend entry is
written as its kind's spec takes it (mlx-lm's options flat on the entry, as a user writes
them; a server's keys; nothing another kind takes)."""

from __future__ import annotations

from pathlib import Path

import yaml

from pytest_infercheck.config import Settings, load_matrix
from pytest_infercheck.report.repro import bundle_matrix

MATRIX = """\
models:
  a: {path: ./a, gguf: ./a.gguf}
backends:
  local: {kind: mlx-lm, dtype: float32}
  kv4: {kind: mlx-lm, kv_bits: 4, quantized_kv_start: 0, batching: false}
  draft: {kind: mlx-lm, draft_model: ./d, num_draft_tokens: 3}
  llama:
    kind: llama-server
    serve: "llama-server -m {model} --port {port}"
    env: {A: b}
    startup_timeout: 30
  srv: {kind: openai, url: "http://127.0.0.1:8000", logprobs: false, model_name: m}
suites: [reasoning]
checks:
  - diff: {model: a, backends: [local, kv4, draft, llama, srv]}
"""


def test_a_bundles_matrix_loads_with_the_same_backends(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a.gguf").write_text("")
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX)
    loaded = load_matrix(path)
    bundle = bundle_matrix(loaded, 0, Settings(), "suite.jsonl")
    assert bundle["backends"]["kv4"] == {
        "kind": "mlx-lm",
        "kv_bits": 4,
        "quantized_kv_start": 0,
        "batching": False,
    }
    assert bundle["backends"]["draft"] == {
        "kind": "mlx-lm",
        "draft_model": str(tmp_path / "d"),
        "num_draft_tokens": 3,
    }
    assert bundle["backends"]["llama"]["env"] == {"A": "<redacted>"}
    again = tmp_path / "bundle" / "infercheck.yaml"
    again.parent.mkdir()
    (again.parent / "suite.jsonl").write_text('{"prompt": "1+1=", "answer": "2"}\n')
    again.write_text(yaml.safe_dump(bundle, sort_keys=False))
    reloaded = load_matrix(again).matrix.backends
    original = loaded.matrix.backends
    assert {n: s.model_dump() for n, s in reloaded.items() if n != "llama"} == {
        n: s.model_dump() for n, s in original.items() if n != "llama"
    }
    assert reloaded["kv4"].options.written() == {"kv_bits": 4, "quantized_kv_start": 0}
