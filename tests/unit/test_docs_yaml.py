"""Every ```yaml block of the docs (``docs/**/*.md``) and of ``README.md`` is collected by the
plugin, so the docs cannot show a matrix it refuses.

A block is a matrix, or a fragment of one (some of ``models``, ``backends``, ``suites``,
``settings``, ``checks``): what it leaves out is filled in (a bundled suite, a model or backend
its checks name), model folders, GGUF files and suite files it names that are not on this
machine are stubbed (the tiny adder, an empty file, the quickstart's sums), and the result is
collected by one ``pytest --collect-only`` run over all blocks, as a user's run would collect
it: the matrix loader, the local-model check, the suites, the gates refused at collection.
A block that is not about the matrix (a CI workflow, a compose file) says so on its first
line: ``# not a matrix``; it must still parse as YAML.

A block that does not collect fails naming its file and line, with the plugin's message.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from conftest import REPO
from pytest_infercheck.matrix import parse_model_shorthand

DOCS = REPO / "docs"
NOT_A_MATRIX = "# not a matrix"
MATRIX_KEYS = {"models", "backends", "suites", "settings", "checks"}
TINY_ADDER = REPO / "examples" / "models" / "tiny-adder"
SUMS = REPO / "examples" / "quickstart" / "addition.jsonl"
STUB_BACKEND = {"kind": "vllm", "url": "http://127.0.0.1:9"}
"""A backend a fragment's checks name and do not define: a server attached by URL (nothing is
started or loaded at collection; it gives logprobs, so KL gates are measurable)."""


@dataclass(frozen=True)
class Block:
    where: str  # docs/path.md:LINE (the line of the opening fence)
    text: str


def yaml_blocks() -> list[Block]:
    pages = [*sorted(DOCS.rglob("*.md")), REPO / "README.md"]
    blocks = []
    for page in pages:
        text = page.read_text()
        for found in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
            line = text.count("\n", 0, found.start()) + 1
            blocks.append(Block(f"{page.relative_to(REPO)}:{line}", found.group(1)))
    return blocks


BLOCKS = yaml_blocks()
MATRICES = [b for b in BLOCKS if not b.text.lstrip().startswith(NOT_A_MATRIX)]
OTHERS = [b for b in BLOCKS if b.text.lstrip().startswith(NOT_A_MATRIX)]


def _refs(check: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(model, backend or None) of every target a check entry names; a diff's model on each of
    its backends."""
    found: list[tuple[str, str | None]] = []

    def add(ref: Any) -> None:
        if isinstance(ref, str) and not ref.startswith("golden:"):
            model, _, backend = ref.partition("@")
            found.append((model, backend or None))

    for key, value in check.items():
        if not isinstance(value, (dict, str)) or key in {"flips", "name", "suites"}:
            continue
        if isinstance(value, str):
            add(value)
            continue
        if "model" in value:
            for entry in value.get("backends") or [None]:
                if isinstance(entry, str) and "@" in entry:  # MODEL@BACKEND: another model
                    add(entry)
                else:
                    found.append((value["model"], entry))
            continue
        for field in ("baseline", "test", "target"):
            add(value.get(field))
        for field in ("targets", "models"):
            for ref in value.get(field) or []:
                add(ref)
    return found


def stubbed(block: Block, folder: Path) -> dict[str, Any]:
    """The block as a whole matrix whose files exist (see the module's docstring)."""
    data = yaml.safe_load(block.text)
    assert isinstance(data, dict), f"{block.where}: not a mapping (mark it '{NOT_A_MATRIX}')"
    unknown = set(data) - MATRIX_KEYS
    assert not unknown, (
        f"{block.where}: keys {sorted(unknown)} are not the matrix's "
        f"(mark a block that is not a matrix '{NOT_A_MATRIX}')"
    )
    models = data.setdefault("models", {}) or {}
    data["models"] = models
    data.setdefault("suites", ["reasoning"])
    if not data.get("checks"):  # a fragment of models or backends: a check on each backend
        model = next(iter(models), "m")
        models.setdefault(model, {"path": str(TINY_ADDER)})
        backends = data.get("backends") or {"local": {"kind": "mlx-lm"}}
        data["checks"] = [{"determinism": {"target": f"{model}@{b}"}} for b in backends]
    for check in data["checks"]:
        for model, backend in _refs(check):
            models.setdefault(model, {"path": str(TINY_ADDER)})
            if backend is not None and backend not in data.get("backends", {}):
                data.setdefault("backends", {})[backend] = dict(STUB_BACKEND)
    for name, spec in list(models.items()):
        if isinstance(spec, str):
            spec = models[name] = parse_model_shorthand(spec)
        if spec.get("path") == str(TINY_ADDER) and "gguf" not in spec:
            spec["gguf"] = str(_stub_file(folder, f"{name}.gguf"))  # a stub for any backend
        if spec.get("path") and not (folder / spec["path"]).exists():
            spec["path"] = str(_stub_dir(folder, name))
        if spec.get("gguf") and not (folder / spec["gguf"]).exists():
            spec["gguf"] = str(_stub_file(folder, f"{name}.gguf"))
        adapter = spec.get("adapter")
        if isinstance(adapter, str):
            key = "gguf" if adapter.endswith(".gguf") else "path"
            adapter = spec["adapter"] = {key: adapter}
        if isinstance(adapter, dict):  # a LoRA adapter not on this machine: a stub
            if adapter.get("path") and not (folder / adapter["path"]).exists():
                adapter["path"] = str(_stub_dir(folder, f"{name}-adapter"))
            if adapter.get("gguf") and not (folder / adapter["gguf"]).exists():
                adapter["gguf"] = str(_stub_file(folder, f"{name}-adapter.gguf"))
    for backend in (data.get("backends") or {}).values():
        draft = backend.get("draft_model") if isinstance(backend, dict) else None
        if draft and not (folder / draft).exists():
            backend["draft_model"] = str(_stub_dir(folder, "draft"))
    data["suites"] = [_suite(folder, ref) for ref in data["suites"]]
    for check in data.get("checks") or []:
        if "suites" in check:
            check["suites"] = [_suite(folder, ref) for ref in check["suites"]]
    return data


def _stub_dir(folder: Path, name: str) -> Path:
    path = folder / "stub-models" / name
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(TINY_ADDER, path)
    return path


def _stub_file(folder: Path, name: str) -> Path:
    path = folder / "stub-models" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()
    return path


def _suite(folder: Path, ref: Any) -> Any:
    """A suite path that is not on this machine replaced by a copy of the quickstart's sums."""
    name = ref.get("suite") if isinstance(ref, dict) else ref
    if not isinstance(name, str) or not name.endswith((".jsonl", ".yaml", ".yml")):
        return ref  # a bundled suite's name
    if (folder / name).exists():
        return ref
    stub = folder / "stub-suites" / Path(name).name
    stub.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(SUMS, stub)
    return {**ref, "suite": str(stub)} if isinstance(ref, dict) else str(stub)


@pytest.fixture(scope="module")
def collected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Every matrix block collected in one run: its folder's collection errors by block."""
    base = tmp_path_factory.mktemp("docs-yaml")
    (base / "pytest.ini").write_text("[pytest]\n")
    folders = {}
    refused = {}
    for index, block in enumerate([*MATRICES, CANARY]):
        folder = base / f"b{index:03d}"
        folder.mkdir()
        try:
            data = stubbed(block, folder)
        except (AssertionError, yaml.YAMLError) as exc:
            refused[block.where] = str(exc)
            continue
        (folder / "infercheck.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        folders[block.where] = folder.name
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=base,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    sections = re.split(r"^_+ ERROR collecting ", done.stdout, flags=re.M)
    errors: dict[str, str] = {}
    for section in sections[1:]:
        folder = section.split("/", 1)[0]
        errors[folder] = errors.get(folder, "") + section
    collected_ids = set(re.findall(r"^(b\d{3})/infercheck\.yaml::", done.stdout, re.M))
    found = {
        where: errors.get(folder, "" if folder in collected_ids else "nothing collected")
        for where, folder in folders.items()
    }
    return {**found, **refused}


CANARY = Block("canary.md:1", "checks:\n  - determinism: q4@llama\n    max_kll: 0.1\n")
"""A block with a mistake, collected with the others: the stubs do not hide it."""


def test_a_mistake_in_a_block_fails_it(collected: dict[str, str]) -> None:
    assert re.search(
        r"infercheck\.yaml:\d+: checks\[0\]\.max_kll: unknown key", collected["canary.md:1"]
    )


def test_the_docs_have_matrices() -> None:
    assert len(MATRICES) >= 20 and any(b.where.startswith("docs/tutorials/") for b in MATRICES)


@pytest.mark.parametrize("block", MATRICES, ids=[b.where for b in MATRICES])
def test_block_collects(block: Block, collected: dict[str, str]) -> None:
    error = collected[block.where]
    assert not error, f"{block.where}: the block does not collect:\n{error}"


@pytest.mark.parametrize("block", OTHERS, ids=[b.where for b in OTHERS])
def test_other_block_parses(block: Block) -> None:
    assert yaml.safe_load(block.text) is not None, block.where


def test_stubs(tmp_path: Path) -> None:
    """What a fragment leaves out is filled in; a block of other keys is refused by name."""
    data = stubbed(CANARY, tmp_path)
    assert data["models"]["q4"]["path"] == str(TINY_ADDER)
    assert data["backends"] == {"llama": STUB_BACKEND}
    with pytest.raises(AssertionError, match=r"docs/y\.md:1: keys \['jobs'\]"):
        stubbed(Block("docs/y.md:1", "jobs: {}\n"), tmp_path)
