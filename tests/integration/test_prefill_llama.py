"""Prefill schedule A/B on a real llama-server (llama.cpp of llama-cpp-python 0.3.36, the tiny
adder's f32 GGUF, ``-fa off -ctk f32 -ctv f32 -np 1 -c 64 -t 2``): the default batch sizes
(``-b 2048 -ub 512``: a whole prompt in one pass) against ``-b 4 -ub 4`` (a prompt of 28 to
34 ids in 7 to 9 passes), as a diff with ``expect: identical`` and a KL gate, the servers
started by the plugin (docs/how-to/prefill.md has the numbers)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.served import backend, llama_flags, llama_serve
from tests.plugin.conftest import INI
from tests.plugin.test_prefill_mlx import suite

SMALL = "-b 4 -ub 4"


def test_small_batches_against_the_default_prefill(
    pytester: pytest.Pytester, adder: str, llama_server_bin: Path
) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", long=suite())
    exact = llama_flags(slots=1, context=64)
    backends = backend("default", "llama-server", llama_serve(llama_server_bin, exact)) + backend(
        "small", "llama-server", llama_serve(llama_server_bin, f"{exact} {SMALL}")
    )
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {adder}\nbackends:\n{backends}"
        "suites: [long.jsonl]\n"
        "checks:\n"
        "  - diff: {model: adder, backends: [default, small]}\n"
        "    max_kl: 1.0e-5\n",
    )
    result = pytester.runpytest_subprocess(
        "-q", "-p", "no:cacheprovider", "--infercheck-results=r.json"
    )
    doc = json.loads((pytester.path / "r.json").read_text())
    items = [i for i in doc["items"] if i["role"] == "prompt"]
    assert len(items) == 8, result.stdout.str()[-4000:]
    kl = [i["data"]["kl_max"] for i in items]
    print("largest per-position KL", max(kl), "methods", {i["data"]["method"] for i in items})
    failed = [i["name"] for i in doc["items"] if i["outcome"] != "passed"]
    assert failed == [], result.stdout.str()[-4000:]
    assert {i["data"]["method"] for i in items} == {"teacher-forced"}
    assert max(kl) < 1e-5
