"""Adding a backend touches its own module and one line of the backend registry, nothing else.

The test copies the package, writes one new backend module (``mlx-relay``: mlx-lm behind a
relay that passes every request on, and, when told to, garbles the answer as a faulty
engine would) and adds its line to ``backends/registry.py``. Then a matrix that diffs mlx-lm
against the new backend runs through pytester: the YAML ``kind:`` and the new kind's model
shorthand, the url/serve rule, the factory, the comparison and the matrix's JSON Schema all
follow from the registry. The diff passes on the faithful relay and fails, naming the
changed answers, when the relay swaps a token.
"""

from __future__ import annotations

import difflib
import filecmp
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

import pytest_infercheck

from .helpers import ADDITION, suite_jsonl

BACKEND_MODULE = '''\
"""mlx-relay: mlx-lm behind a relay (an example backend kind).

Every request is passed on to the in-process mlx-lm backend of the same model and options.
With ``INFERCHECK_RELAY_FAULT=swap`` in the environment the relay garbles each answer of
two tokens or more, as a faulty engine would: its first token is replaced by its second.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from . import mlx_lm
from .base import Backend, Capabilities, Generation, GenerationParams, PromptInput

if TYPE_CHECKING:
    import numpy as np

    from .spec import MlxLmSpec


class MlxRelayBackend(Backend):
    """An mlx-lm backend behind a relay. It offers no optional capability (no lockstep
    stepping): the comparisons generate and score it one side at a time."""

    kind = "mlx-relay"

    def __init__(self, name: str, inner: Backend) -> None:
        super().__init__(name)
        self.inner = inner

    @property
    def capabilities(self) -> Capabilities:  # type: ignore[override]
        return self.inner.capabilities

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        return await self.inner.render(user_text, system, thinking)

    def tokenizer_fingerprint(self) -> str | None:
        return self.inner.tokenizer_fingerprint()

    async def generate(self, prompt: PromptInput, params: GenerationParams) -> Generation:
        generation = await self.inner.generate(prompt, params)
        ids = generation.token_ids or []
        if os.environ.get("INFERCHECK_RELAY_FAULT") != "swap" or len(ids) < 2:
            return generation
        swapped = [ids[1], *ids[1:]]
        shown = swapped[:-1] if generation.finish_reason == "stop" else swapped
        text = await self.inner.detokenize(shown)
        return dataclasses.replace(generation, token_ids=swapped, text=text or "")

    async def score(self, prompt_ids: list[int], continuation_ids: list[int]) -> np.ndarray:
        return await self.inner.score(prompt_ids, continuation_ids)

    async def tokenize(self, text: str) -> list[int] | None:
        return await self.inner.tokenize(text)

    async def detokenize(self, ids: Sequence[int]) -> str | None:
        return await self.inner.detokenize(ids)

    async def token_pieces(self, ids: Sequence[int]) -> list[str] | None:
        return await self.inner.token_pieces(ids)

    async def special_tokens(self, ids: Sequence[int]) -> set[int] | None:
        return await self.inner.special_tokens(ids)

    def identity(self) -> dict[str, Any]:
        return {**self.inner.identity(), "kind": self.kind, "name": self.name}


def create(
    name: str, spec: MlxLmSpec, source: str, revision: str | None, url: str | None
) -> MlxRelayBackend:
    """The relay of an ``mlx-relay`` entry, around mlx-lm's backend of the same options."""
    return MlxRelayBackend(name, mlx_lm.create(name, spec, source, revision, url))
'''

REGISTRY_LINE = '    BackendKind("mlx-relay", ".mlx_relay", MlxLmSpec, shorthand="relay:DIR"),'

MATRIX = """\
models:
  adder: "relay:{model}"
backends:
  local: {{kind: mlx-lm}}
  relay: {{kind: mlx-relay}}
suites: [addition.jsonl]
checks:
  - diff: {{model: adder, backends: [local, relay]}}
"""


def add_backend(package: Path) -> list[str]:
    """Write the backend's module and register it; the registry lines that changed."""
    (package / "backends" / "mlx_relay.py").write_text(BACKEND_MODULE)
    registry = package / "backends" / "registry.py"
    before = registry.read_text()
    last = next(line for line in before.splitlines() if line.startswith('    BackendKind("ollama"'))
    after = before.replace(last + "\n", f"{last}\n{REGISTRY_LINE}\n")
    registry.write_text(after)
    diff = difflib.ndiff(before.splitlines(), after.splitlines())
    return [line for line in diff if line[:1] in "+-"]


def changed_files(original: Path, copy: Path) -> list[str]:
    """The files of ``copy`` that differ from ``original`` or are new (no caches)."""
    found: list[str] = []

    def walk(cmp: filecmp.dircmp[str], at: str) -> None:
        found.extend(at + name for name in cmp.diff_files + cmp.right_only)
        for name, sub in cmp.subdirs.items():
            walk(sub, f"{at}{name}/")

    walk(filecmp.dircmp(original, copy, ignore=["__pycache__"]), "")
    return sorted(found)


@pytest.fixture
def project(
    pytester: pytest.Pytester,
    tmp_path: Path,
    tiny_models: dict[str, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> Path:
    """A copy of the package with the new backend, first on the inner runs' path, and a
    matrix that diffs mlx-lm against it on the tiny adder (written with the new shorthand)."""
    original = Path(pytest_infercheck.__file__).parent
    package = tmp_path / "src" / "pytest_infercheck"
    shutil.copytree(original, package, ignore=shutil.ignore_patterns("__pycache__"))
    assert add_backend(package) == [f"+ {REGISTRY_LINE}"]
    assert changed_files(original, package) == ["backends/mlx_relay.py", "backends/registry.py"]
    monkeypatch.setenv("PYTHONPATH", str(package.parent))
    monkeypatch.delenv("INFERCHECK_RELAY_FAULT", raising=False)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(".yaml", infercheck=MATRIX.format(model=tiny_models["bf16"]))
    return pytester.path


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rf", *args)


def _prompt_data(path: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """Each prompt item of the results: its prompt id -> (outcome, the comparison)."""
    items = json.loads(path.read_text())["items"]
    return {
        i["data"]["prompt_id"]: (i["outcome"], i["data"]) for i in items if i["role"] == "prompt"
    }


def test_a_faithful_new_backend_passes_a_diff_against_mlx_lm(
    pytester: pytest.Pytester, project: Path
) -> None:
    result = _run(pytester, "--infercheck-results=r.json")
    result.assert_outcomes(passed=len(ADDITION) + 1)
    result.stdout.fnmatch_lines(["diff(adder) addition:", "  adder@relay *0/8 *PASS"])
    compared = _prompt_data(project / "r.json")
    assert sorted(compared) == sorted(pid for pid, _, _ in ADDITION)
    for outcome, data in compared.values():
        assert (outcome, data["baseline"], data["test"]) == ("passed", "adder@local", "adder@relay")
        assert data["test_ids"] == data["base_ids"] and data["sameness"] == "identical"
        # Token-level, scored by the relay itself (it does not step in lockstep).
        assert (data["method"], data["scoring"], data["kl_max"]) == (
            "teacher-forced",
            "separate",
            0,
        )


def test_a_new_backend_that_swaps_a_token_fails_the_diff(
    pytester: pytest.Pytester, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERCHECK_RELAY_FAULT", "swap")
    result = _run(pytester, "--infercheck-results=r.json")
    assert result.ret == 1
    compared = _prompt_data(project / "r.json")
    failed = []
    for pid, (outcome, data) in compared.items():
        base = data["base_ids"]
        assert data["test_ids"] == [base[1], *base[1:]], pid
        changed = base[0] != base[1]
        assert data["first_divergence"] == (0 if changed else None), pid
        if changed and data["base_answer"] == data["reference"]:  # a correct answer garbled
            assert (outcome, data["flip"]) == ("failed", "correct_to_wrong"), pid
            failed.append(f"FAILED infercheck.yaml::diff(adder)::addition::{pid}[[]relay[]]*")
    assert len(failed) >= len(ADDITION) // 2, compared  # the tiny adder adds well
    result.stdout.fnmatch_lines(failed, consecutive=False)


def test_the_new_kind_is_validated_like_the_others(
    pytester: pytest.Pytester, project: Path
) -> None:
    matrix = project / "infercheck.yaml"
    matrix.write_text(matrix.read_text().replace("{kind: mlx-relay}", "{kind: mlx-rel}"))
    result = _run(pytester, "--collect-only", "-q")
    assert result.ret != 0
    result.stdout.fnmatch_lines(  # the suggestion is the new kind's: it is in the registry
        [
            "*infercheck.yaml:5: backends.relay.kind: *unknown backend kind 'mlx-rel' "
            "(did you mean 'mlx-relay'?)"
        ]
    )
    matrix.write_text(matrix.read_text().replace("{kind: mlx-rel}", "{kind: tensorrt}"))
    result = _run(pytester, "--collect-only", "-q")
    known = "mlx-lm, openai, vllm, vllm-mlx, sglang, llama-server, ollama, mlx-relay)"
    assert f"unknown backend kind 'tensorrt' (known kinds: {known}" in result.stdout.str()
    # Its spec is mlx-lm's (its registry line says so): an in-process kind takes no url, and
    # no key that only servers honour, each refused at its line.
    matrix.write_text(
        matrix.read_text().replace(
            "{kind: tensorrt}",
            "{kind: mlx-relay, dtype: float32,\n    url: 'http://x',\n    model_name: m}",
        )
    )
    result = _run(pytester, "--collect-only", "-q")
    result.stdout.fnmatch_lines(
        [
            "*infercheck.yaml:6: backends.relay.url: a mlx-relay backend runs in-process: "
            "remove 'url' (a key of openai, *",
            "*infercheck.yaml:7: backends.relay.model_name: model_name is an option of openai, "
            "vllm, vllm-mlx, sglang and ollama backends, not of a mlx-relay backend",
        ]
    )
    assert "dtype" not in result.stdout.str()


def test_the_new_kind_is_in_the_matrix_schema(pytester: pytest.Pytester, project: Path) -> None:
    result = pytester.run(sys.executable, "-m", "pytest_infercheck.cli", "schema")
    assert result.ret == 0, result.stderr.str()
    defs = json.loads(result.stdout.str())["$defs"]
    assert defs["MlxLmSpec"]["properties"]["kind"]["enum"] == ["mlx-lm", "mlx-relay"]
    backends = json.loads(result.stdout.str())["properties"]["backends"]
    specs = [ref["$ref"] for ref in backends["additionalProperties"]["anyOf"]]
    assert specs.count("#/$defs/MlxLmSpec") == 1  # one definition per spec, not per kind
    shorthand = defs["ModelSpec"]["anyOf"][0]
    assert "relay:DIR" in shorthand["description"] and "|relay):" in shorthand["pattern"]
