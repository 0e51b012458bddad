"""``pytest-infercheck schema``: the matrix's JSON Schema agrees with :func:`load_matrix`.

The schema is what an editor sees, so a file is checked as an editor reads it (YAML 1.2:
``1e-6`` is a number, where PyYAML's YAML 1.1 reads a string that pydantic then converts).
Where the two verdicts differ by design, the case is listed in ``EXCEPTIONS`` with why.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import shlex
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from jsonschema import Draft202012Validator, ValidationError
from pydantic import BaseModel, BeforeValidator, PlainValidator, WrapValidator

from pytest_infercheck import schema as schema_module
from pytest_infercheck.checks.registry import KINDS
from pytest_infercheck.cli import main
from pytest_infercheck.config import Matrix, ModelSpec, load_matrix
from pytest_infercheck.schema import COUNTERPARTS, DRAFT, SchemaGapError, matrix_schema
from pytest_infercheck.specs import TargetCheck
from pytest_infercheck.yamlpos import SourceError

from .test_config import VALID
from .test_golden import MATRIX as GOLDEN_MATRIX

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOC_PAGES = [*sorted((ROOT / "docs").rglob("*.md")), README]
"""The pages whose YAML blocks are checked: the docs site and the README."""
EDITOR_SUPPORT = ROOT / "docs" / "reference" / "matrix.md"
"""The page that shows the schema command and the modeline."""
SCHEMA = matrix_schema()
VALIDATOR = Draft202012Validator(SCHEMA)


# -- reading a file as an editor does ----------------------------------------------------------
class _EditorLoader(yaml.SafeLoader):
    """PyYAML plus YAML 1.2's floats without a dot (``1e-6``), as an editor's parser reads."""


_EditorLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def editor_yaml(text: str) -> Any:
    return yaml.load(text, Loader=_EditorLoader)


def schema_errors(data: Any, schema: dict[str, Any] | None = None) -> list[str]:
    """Every error message, with the alternatives' own errors (``anyOf``/``oneOf``)."""
    validator = VALIDATOR if schema is None else Draft202012Validator(schema)

    def flat(errors: typing.Iterable[ValidationError]) -> Iterator[str]:
        for error in errors:
            yield f"{error.json_path}: {error.message}"
            yield from flat(error.context or [])

    return list(flat(validator.iter_errors(data)))


def load_error(tmp_path: Path, text: str) -> str | None:
    """None when ``load_matrix`` accepts ``text``, else its message."""
    path = tmp_path / "infercheck.yaml"
    path.write_text(text)
    try:
        load_matrix(path)
    except SourceError as exc:
        return str(exc)
    return None


def def_schema(name: str) -> dict[str, Any]:
    """The schema of one definition, with the others for its references."""
    return {"$ref": f"#/$defs/{name}", "$defs": SCHEMA["$defs"]}


# -- the shipped matrices ----------------------------------------------------------------------
def readme_matrices() -> dict[str, str]:
    """The YAML blocks of the docs and the README that are (parts of) matrices, those with
    ``checks:``, by ``PAGE:LINE``."""
    found = {}
    for page in DOC_PAGES:
        text = page.read_text()
        for block in re.finditer(r"^```yaml\n(.*?)^```", text, re.S | re.M):
            if re.search(r"^checks:", block.group(1), re.M):
                where = f"{page.relative_to(ROOT)}:{text.count(chr(10), 0, block.start()) + 1}"
                found[where] = block.group(1)
    return found


EXAMPLES = sorted(ROOT.glob("examples/**/*.yaml"))
STUB = {"models": {"m": {"path": "./m"}}, "suites": ["reasoning"]}
"""What a README fragment leaves out (it shows one section; the first block the rest)."""
REF_ERRORS = re.compile(r"unknown model|unknown backend|needs '@backend'")


def test_there_are_shipped_matrices() -> None:
    assert len(EXAMPLES) >= 2 and len(readme_matrices()) >= 4


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_example_matrices_validate_and_load(path: Path) -> None:
    assert schema_errors(editor_yaml(path.read_text())) == []
    load_matrix(path)


@pytest.mark.parametrize("block", readme_matrices().values(), ids=readme_matrices().keys())
def test_readme_matrices_validate(tmp_path: Path, block: str) -> None:
    data = {**STUB, **editor_yaml(block)}
    assert schema_errors(data) == []
    # The blocks name each other's models (q8, adder@llama): load_matrix may only fail there.
    error = load_error(tmp_path, yaml.safe_dump({**STUB, **yaml.safe_load(block)}))
    assert error is None or REF_ERRORS.search(error), error


@pytest.mark.parametrize(
    "text",
    [
        VALID,
        GOLDEN_MATRIX + '  - compare: {baseline: "golden:adder-v1", test: adder}\n',
    ],
    ids=["test_config.VALID", "test_golden.MATRIX"],
)
def test_matrices_of_the_tests_validate_and_load(tmp_path: Path, text: str) -> None:
    assert schema_errors(editor_yaml(text)) == []
    assert load_error(tmp_path, text) is None


# -- the schema itself -------------------------------------------------------------------------
def test_is_a_valid_draft_2020_12_schema() -> None:
    Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == DRAFT == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["title"] and "infercheck.yaml" in SCHEMA["description"]
    assert SCHEMA["required"] == ["models", "suites", "checks"]


def _objects(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The object branches of a definition (a shorthand's string branch aside)."""
    if schema.get("type") == "object":
        yield schema
    for branch in schema.get("anyOf", []):
        yield from _objects(branch)


@pytest.mark.parametrize("name", sorted(SCHEMA["$defs"]))
def test_every_definition_is_described_and_closed(name: str) -> None:
    definition = SCHEMA["$defs"][name]
    assert definition["description"]  # the model's docstring
    objects = list(_objects(definition))
    assert objects and all(o["additionalProperties"] is False for o in objects)


# yaml-language-server implements draft 7; the schema says 2020-12 and keeps to what both share.
DRAFT_7_KEYWORDS = {
    "$schema", "$ref", "$defs", "title", "description", "default", "examples", "type", "enum",
    "const", "pattern", "minLength", "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "items", "minItems", "uniqueItems", "properties", "patternProperties",
    "additionalProperties", "required", "minProperties", "anyOf", "oneOf", "allOf", "not",
    "if", "then", "else",
}  # fmt: skip


def _keywords(schema: Any) -> Iterator[str]:
    if isinstance(schema, list):
        for sub in schema:
            yield from _keywords(sub)
    elif isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            if key in ("properties", "patternProperties", "$defs"):
                for sub in value.values():
                    yield from _keywords(sub)
            elif key not in ("default", "examples", "enum", "const"):
                yield from _keywords(value)


def test_keywords_are_the_ones_editors_know() -> None:
    assert set(_keywords(SCHEMA)) <= DRAFT_7_KEYWORDS


def test_one_kind_key_per_check_from_the_registry() -> None:
    check = SCHEMA["$defs"]["CheckSpec"]
    assert [alt["required"] for alt in check["oneOf"]] == [[kind.name] for kind in KINDS]
    for kind in KINDS:
        assert check["properties"][kind.name]["description"] == inspect.cleandoc(
            kind.spec.options.__doc__ or ""
        )


def test_record_is_not_offered() -> None:
    settings = SCHEMA["$defs"]["Settings"]
    assert "record" not in settings["properties"]
    assert "--infercheck-record" in json.dumps(settings["patternProperties"])
    assert "record" not in json.dumps(SCHEMA["properties"]["settings"])  # no default object


# -- every validator has its counterpart ---------------------------------------------------------
def _models(cls: type[BaseModel], seen: set[type[BaseModel]], found: dict[str, str]) -> None:
    """The models reachable from ``cls`` into ``seen``; the validators given as annotations
    (``Annotated[..., PlainValidator(f)]``) into ``found``, with the models of their
    ``json_schema_input_type`` (a backend entry: each kind's spec)."""

    def walk(annotation: Any) -> None:
        model = isinstance(annotation, type) and issubclass(annotation, BaseModel)
        if model and annotation not in seen:
            seen.add(annotation)
            for field in annotation.model_fields.values():
                walk(field.annotation)
        if isinstance(annotation, PlainValidator | BeforeValidator | WrapValidator):
            found[annotation.func.__qualname__] = type(annotation).__name__
            walk(getattr(annotation, "json_schema_input_type", None))
        for arg in typing.get_args(annotation):
            walk(arg)
        for arg in getattr(annotation, "__metadata__", ()):
            walk(arg)

    walk(cls)


def _validators() -> dict[str, str]:
    """Qualified name -> mode of every validator of the matrix's models."""
    models: set[type[BaseModel]] = set()
    found: dict[str, str] = {}
    _models(Matrix, models, found)
    for model in models:
        decorators = model.__pydantic_decorators__
        for d in decorators.model_validators.values():
            found[d.func.__qualname__] = d.info.mode
        for f in decorators.field_validators.values():
            found[f.func.__qualname__] = f.info.mode
    return found


def test_every_before_validator_has_a_counterpart_and_none_is_stale() -> None:
    validators = _validators()
    before = {name for name, mode in validators.items() if mode != "after"}
    assert before == {
        "ModelSpec._shorthand",
        "AdapterSpec._shorthand",
        "validate_backend_entry",
        "TargetCheck._shorthand",
        "MatrixFields._suite_shorthand",
        "CheckEntry._suite_shorthand",
        "RequestParams._one_stop",
    }
    assert before <= set(COUNTERPARTS) <= set(validators)


@pytest.mark.parametrize("name", sorted(n for n, m in _validators().items() if m != "after"))
def test_a_before_validator_without_counterpart_fails_the_schema(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.delitem(schema_module.COUNTERPARTS, name)
    with pytest.raises(SchemaGapError, match=re.escape(name)):
        matrix_schema()


# -- the shorthands ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "spec",
    [
        "mlx:./models/tiny",
        "mlx:mlx-community/Qwen3-4B-4bit",
        "gguf:./tiny.gguf",
        "./weights/tiny-q4.gguf",
        "ollama:llama3.2:1b",
        "llama3.2:1b",
        "openai:gpt-4o-mini",
        "vllm-mlx:./models/tiny",
        "mlx-community/Llama-3.2-1B-4bit",
        "./models/tiny",
        "x",
        "mlx:x/",
        "mlx:gguf:",
        "gguf:a",
        "ollama:\n",
        "",
        "mlx:",
        "gguf:",
        "ollama:",
        "openai:",
        "vllm-mlx:",
    ],
)
def test_model_shorthand_strings_agree_with_parse_model_shorthand(spec: str) -> None:
    try:
        ModelSpec.model_validate(spec)
        loads = True
    except ValueError:
        loads = False
    assert (schema_errors(spec, def_schema("ModelSpec")) == []) == loads


@pytest.mark.parametrize(
    "kind", [k for k in KINDS if issubclass(k.spec.options, TargetCheck)], ids=lambda k: k.name
)
def test_target_shorthand_is_the_target(kind: Any) -> None:
    assert schema_errors("q4@llama", def_schema(kind.spec.options.__name__)) == []
    options = kind.spec.options
    assert options.model_validate("q4@llama") == options.model_validate({"target": "q4@llama"})


# -- schema-valid <=> load_matrix succeeds -----------------------------------------------------
BASE = """\
models:
  bf16: {path: ./m/bf16, gguf: ./m/bf16.gguf, quantization: bf16}
  q4: "mlx:./m/q4"
  hub: mlx-community/Qwen3-4B-4bit
  served: "ollama:qwen3:4b"
  file: ./m/q8.gguf
backends:
  local: {kind: mlx-lm, dtype: float32, chat: false}
  llama: {kind: llama-server, serve: "llama-server -m {model} --port {port}", env: {A: b}}
  vllm: {kind: vllm-mlx, url: "http://127.0.0.1:8000", max_concurrency: 8, retries: 0}
  remote: {kind: openai, url: "http://127.0.0.1:8001", api_key_env: MY_KEY, timeout: 30}
  ollama: {kind: ollama, url: "http://127.0.0.1:11434"}
suites: [reasoning, {suite: mine.jsonl, limit: 5}]
settings: {num_prompts: 5, max_tokens: 64, seed: 1, golden_dir: g, golden_top_k: 5}
checks:
  - compare: {baseline: bf16@local, test: q4@local}
    max_kl: 0.05
    flips: {max_rate: 0.1, fail_item_on: any, gate: point}
    suites: [reasoning, {suite: other.yaml}]
  - compare: {baseline: "golden:base-v1", test: q4@local}
  - sweep: {baseline: bf16@local, models: [q4@local, hub@local], self_check: false}
    name: ladder
  - diff: {model: bf16, backends: [local, llama]}
  - determinism: q4@local
  - determinism: {target: served@ollama, runs: 3}
    min_determinism: 0.9
    max_logprob_drift: 1e-6
  - batch-invariance: {target: bf16@local, trials: 2, batch_size: 4, seed: 3}
  - stress: {target: q4@vllm, levels: [1, 4], repeats: 1}
  - stream-parity: bf16@llama
  - endpoint-parity: {target: hub@vllm, endpoints: [completions, chat]}
  - cache-pollution: {target: bf16@llama, hostile: [invalid-utf8]}
"""
DELETE = object()
Edit = tuple[tuple[str | int, ...], Any]


def edited(*edits: Edit) -> Any:
    data = copy.deepcopy(editor_yaml(BASE))
    for path, value in edits:
        parent = data
        for part in path[:-1]:
            parent = parent[part]
        if value is DELETE:
            del parent[path[-1]]
        else:
            parent[path[-1]] = value
    return data


def m(name: str | int) -> tuple[str | int, ...]:
    return ("models", name)


def b(name: str, *rest: str) -> tuple[str, ...]:
    return ("backends", name, *rest)


def c(index: int, *rest: str | int) -> tuple[str | int, ...]:
    return ("checks", index, *rest)


# (id, edits, valid): valid for the schema and for load_matrix alike.
MUTATIONS: list[tuple[str, list[Edit], bool]] = [
    ("base", [], True),
    ("model as bare hub repo", [(m("q4"), "org/name")], True),
    ("model as vllm-mlx shorthand", [(m("q4"), "vllm-mlx:./m/q4")], True),
    ("model with empty path but a gguf", [(m("q4"), {"path": "", "gguf": "q.gguf"})], True),
    ("model with null path and a repo", [(m("q4"), {"path": None, "repo": "o/m"})], True),
    ("model with a path and null repo", [(m("q4"), {"path": "./m", "repo": None})], True),
    ("target shorthand of stress", [(c(7, "stress"), "q4@vllm")], True),
    ("suites: names only", [(("suites",), ["reasoning"])], True),
    ("check suites null", [(c(0, "suites"), None)], True),
    ("check suites empty", [(c(0, "suites"), [])], True),
    ("a second kind key, null", [(c(0, "sweep"), None)], True),
    ("record: false", [(("settings", "record"), False)], True),
    ("levels unsorted", [(c(7, "stress", "levels"), [4, 1])], True),
    (
        "server started with serve",
        [(b("vllm"), {"kind": "vllm-mlx", "serve": "v --port {port}"})],
        True,
    ),
    ("an integer threshold", [(c(0, "max_kl"), 1)], True),
    ("mlx-lm options", [(b("local", "kv_bits"), 4), (b("local", "quantized_kv_start"), 0)], True),
    (
        "mlx-lm draft model",
        [(b("local", "draft_model"), "./d"), (b("local", "num_draft_tokens"), 0)],
        True,
    ),
    ("mlx-lm batching off", [(b("local", "batching"), False)], True),
    ("openai logprobs off", [(b("remote", "logprobs"), False)], True),
    ("ollama model_name", [(b("ollama", "model_name"), "qwen3:4b")], True),
    (
        "sglang model_name",
        [(b("ollama", "kind"), "sglang"), (b("ollama", "model_name"), "m")],
        True,
    ),
    ("no settings", [(("settings",), DELETE)], True),
    ("null setting", [(("settings", "num_prompts"), None)], True),
    # Rejected by both.
    ("no models", [(("models",), DELETE)], False),
    ("no models at all", [(("models",), {})], False),
    ("model empty", [(m("q4"), "")], False),
    ("model bare prefix", [(m("q4"), "mlx:")], False),
    ("model bare gguf prefix", [(m("q4"), "gguf:")], False),
    ("model a number", [(m("q4"), 5)], False),
    ("model null", [(m("q4"), None)], False),
    ("model without a source", [(m("q4"), {"quantization": "4bit"})], False),
    ("model with empty path alone", [(m("q4"), {"path": ""})], False),
    ("model with path and repo", [(m("q4"), {"path": "./m", "repo": "o/m"})], False),
    ("model with empty path and repo", [(m("q4"), {"path": "", "repo": "o/m"})], False),
    ("model with a typo", [(m("q4"), {"path": "./m", "revison": "main"})], False),
    ("mlx-lm with a url", [(b("local", "url"), "http://x")], False),
    ("mlx-lm with serve", [(b("local", "serve"), "x --port {port}")], False),
    ("server with url and serve", [(b("vllm", "serve"), "v --port {port}")], False),
    ("server with neither", [(b("vllm", "url"), DELETE)], False),
    ("server with null url", [(b("vllm", "url"), None)], False),
    ("serve without {port}", [(b("llama", "serve"), "llama-server -m {model}")], False),
    ("url not http", [(b("vllm", "url"), "ftp://x")], False),
    ("unknown backend kind", [(b("local", "kind"), "tensorrt")], False),
    ("bad api_key_env", [(b("remote", "api_key_env"), "1BAD")], False),
    ("max_concurrency 0", [(b("vllm", "max_concurrency"), 0)], False),
    ("timeout 0", [(b("vllm", "timeout"), 0)], False),
    ("unknown backend key", [(b("vllm", "gpu"), True)], False),
    ("unknown dtype", [(b("local", "dtype"), "float64")], False),
    ("env value a number", [(b("llama", "env"), {"A": 1})], False),
    ("backend without kind", [(b("ollama", "kind"), DELETE)], False),
    ("vllm-mlx with dtype", [(b("vllm", "dtype"), "float32")], False),
    ("openai with add_bos", [(b("remote", "add_bos"), False)], False),
    ("llama-server with model_name", [(b("llama", "model_name"), "x")], False),
    ("ollama with logprobs", [(b("ollama", "logprobs"), False)], False),
    (
        "sglang with logprobs",
        [(b("ollama", "kind"), "sglang"), (b("ollama", "logprobs"), False)],
        False,
    ),
    ("mlx-lm with max_concurrency", [(b("local", "max_concurrency"), 2)], False),
    ("mlx-lm with env", [(b("local", "env"), {"A": "b"})], False),
    ("env on an attached server", [(b("vllm", "env"), {"A": "b"})], False),
    ("health_path on an attached server", [(b("remote", "health_path"), "/x")], False),
    ("startup_timeout on an attached server", [(b("ollama", "startup_timeout"), 5)], False),
    ("num_draft_tokens without draft_model", [(b("local", "num_draft_tokens"), 2)], False),
    ("kv_group_size without kv_bits", [(b("local", "kv_group_size"), 32)], False),
    (
        "kv_bits with max_kv_size",
        [(b("local", "kv_bits"), 4), (b("local", "max_kv_size"), 64)],
        False,
    ),
    (
        "draft with max_kv_size",
        [(b("local", "draft_model"), "d"), (b("local", "max_kv_size"), 64)],
        False,
    ),
    ("draft with kv_bits", [(b("local", "draft_model"), "d"), (b("local", "kv_bits"), 4)], False),
    ("kv_bits 7", [(b("local", "kv_bits"), 7)], False),
    ("a backend a string", [(b("ollama"), "ollama")], False),
    ("no suites", [(("suites",), [])], False),
    ("suites a string", [(("suites",), "reasoning")], False),
    ("suite without suite", [(("suites",), [{"limit": 5}])], False),
    ("suite limit 0", [(("suites",), [{"suite": "x", "limit": 0}])], False),
    ("suite typo", [(("suites",), [{"suite": "x", "limt": 1}])], False),
    ("suite a number", [(("suites",), [5])], False),
    ("num_prompts 0", [(("settings", "num_prompts"), 0)], False),
    ("golden_top_k 1001", [(("settings", "golden_top_k"), 1001)], False),
    ("record: true", [(("settings", "record"), True)], False),
    ("unknown setting", [(("settings", "seeed"), 1)], False),
    ("settings null", [(("settings",), None)], False),
    ("no checks", [(("checks",), [])], False),
    ("checks a mapping", [(("checks",), {"compare": {"baseline": "bf16", "test": "q4"}})], False),
    ("two kind keys", [(c(0, "determinism"), "q4@local")], False),
    ("no kind key", [(c(5, "determinism"), DELETE)], False),
    ("only a null kind key", [(c(4, "determinism"), None)], False),
    ("unknown key max_kll", [(c(0, "max_kll"), 0.1)], False),
    ("negative max_kl", [(c(0, "max_kl"), -1)], False),
    ("max_kl a word", [(c(0, "max_kl"), "lots")], False),
    ("min_similarity above 1", [(c(0, "min_similarity"), 1.5)], False),
    ("flip rate above 1", [(c(0, "flips", "max_rate"), 2)], False),
    ("unknown fail_item_on", [(c(0, "flips", "fail_item_on"), "sometimes")], False),
    ("confidence 1", [(c(0, "flips", "confidence"), 1)], False),
    ("flips null", [(c(0, "flips"), None)], False),
    ("name with a space", [(c(2, "name"), "my ladder")], False),
    ("determinism runs 1", [(c(5, "determinism", "runs"), 1)], False),
    ("determinism without target", [(c(5, "determinism", "target"), DELETE)], False),
    ("determinism a number", [(c(4, "determinism"), 5)], False),
    ("determinism a list", [(c(4, "determinism"), ["q4@local"])], False),
    ("determinism unknown option", [(c(5, "determinism", "repeats"), 2)], False),
    ("no levels", [(c(7, "stress", "levels"), [])], False),
    ("level 0", [(c(7, "stress", "levels"), [0, 1])], False),
    ("repeated level", [(c(7, "stress", "levels"), [2, 2])], False),
    ("unknown hostile kind", [(c(10, "cache-pollution", "hostile"), ["nope"])], False),
    ("no hostile kinds", [(c(10, "cache-pollution", "hostile"), [])], False),
    ("one endpoint", [(c(9, "endpoint-parity", "endpoints"), ["chat"])], False),
    ("sweep of no models", [(c(2, "sweep", "models"), [])], False),
    ("diff of one backend", [(c(3, "diff", "backends"), ["local"])], False),
    ("compare without test", [(c(0, "compare", "test"), DELETE)], False),
    ("compare as a string", [(c(1, "compare"), "q4@local")], False),
    ("batch of 1", [(c(6, "batch-invariance", "batch_size"), 1)], False),
    ("unknown top-level key", [(("model",), {})], False),
]


@pytest.mark.parametrize(
    ("edits", "valid"), [(e, v) for _, e, v in MUTATIONS], ids=[i for i, _, _ in MUTATIONS]
)
def test_schema_valid_iff_load_matrix_succeeds(
    tmp_path: Path, edits: list[Edit], valid: bool
) -> None:
    data = edited(*edits)
    errors = schema_errors(data)
    load = load_error(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert (errors == [], load is None) == (valid, valid), (errors, load)


# What the schema cannot or should not say: (id, edits, schema-valid, load_matrix-valid, why).
EXCEPTIONS: list[tuple[str, list[Edit], bool, bool, str]] = [
    # References: a model@backend names a model and a backend of the file, golden:NAME is a
    # baseline only. The schema types them as strings; load_matrix resolves them.
    ("unknown model", [(c(0, "compare", "test"), "q5@local")], True, False, "unknown model"),
    ("unknown backend", [(c(0, "compare", "test"), "q4@gpu")], True, False, "unknown backend"),
    ("ref without backend", [(c(4, "determinism"), "q4")], True, False, "needs '@backend'"),
    ("golden as test", [(c(0, "compare", "test"), "golden:x")], True, False, "baseline of"),
    ("golden target", [(c(4, "determinism"), "golden:x")], True, False, "baseline of"),
    ("bad golden name", [(c(1, "compare", "baseline"), "golden:a/b")], True, False, "golden name"),
    # A model its backends cannot load (a GGUF file alone, checked on mlx-lm).
    ("gguf model on mlx-lm", [(m("q4"), "gguf:./m/q4.gguf")], True, False, "needs 'path' or"),
    # YAML mapping keys that are not strings: an editor's schema sees every key as a string.
    ("a number as model name", [(m("q4"), DELETE), (m(4), {"path": "x"})], True, False, "models"),
    # pydantic's lax mode converts these; the schema asks for the real type.
    ("a quoted number", [(c(0, "max_kl"), "0.05")], False, True, "type"),
    ("a quoted integer", [(c(5, "determinism", "runs"), "3")], False, True, "type"),
    ("yes as a boolean", [(b("local", "chat"), "yes")], False, True, "type"),
    ("1 as a boolean", [(b("local", "chat"), 1)], False, True, "type"),
]


@pytest.mark.parametrize(
    ("edits", "schema_ok", "load_ok", "why"),
    [e[1:] for e in EXCEPTIONS],
    ids=[e[0] for e in EXCEPTIONS],
)
def test_documented_differences(
    tmp_path: Path, edits: list[Edit], schema_ok: bool, load_ok: bool, why: str
) -> None:
    data = edited(*edits)
    errors = schema_errors(data)
    load = load_error(tmp_path, yaml.safe_dump(data, sort_keys=False))
    assert (errors == [], load is None) == (schema_ok, load_ok), (errors, load)
    assert why in (load or " ".join(errors))


@pytest.mark.parametrize(
    ("edits", "culprit"),
    [
        ([(c(0, "sweep"), {"baseline": "bf16@local", "models": ["q4@local"]})], "sweep"),
        ([(c(0, "max_kll"), 0.1)], "max_kll"),
        ([(c(0, "max_kl"), "lots")], "lots"),
    ],
    ids=["two kind keys", "unknown key", "wrong type"],
)
def test_known_bad_inputs_are_named_by_the_schema(
    tmp_path: Path, edits: list[Edit], culprit: str
) -> None:
    data = edited(*edits)
    assert any(culprit in error for error in schema_errors(data)), schema_errors(data)
    assert load_error(tmp_path, yaml.safe_dump(data, sort_keys=False)) is not None


# -- the command ---------------------------------------------------------------------------------
def test_cli_writes_the_schema(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sub" / "infercheck.schema.json"
    assert main(["schema", "-o", str(out)]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
    assert json.loads(out.read_text()) == SCHEMA
    assert out.read_text().startswith('{\n  "$schema": ')


def test_cli_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["schema"]) == 0
    assert json.loads(capsys.readouterr().out) == SCHEMA


def test_cli_cannot_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "file").write_text("")
    assert main(["schema", "-o", str(tmp_path / "file" / "s.json")]) == 2
    assert capsys.readouterr().err.startswith(f"pytest-infercheck: error: cannot write {tmp_path}")


def test_readme_editor_support_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = EDITOR_SUPPORT.read_text()
    command = re.search(r"^pytest-infercheck (schema .*)$", text, re.M)
    modeline = re.search(r"^# yaml-language-server: \$schema=\./(\S+)$", text, re.M)
    assert command and modeline
    monkeypatch.chdir(tmp_path)
    assert main(shlex.split(command.group(1))) == 0
    assert json.loads((tmp_path / modeline.group(1)).read_text()) == SCHEMA


# -- per-kind branches and descriptions -------------------------------------------------------
def _declared(schema: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every property an object declares (``properties`` outside the constraint keywords,
    whose ``properties`` only narrow what is declared elsewhere), with where."""
    if isinstance(schema, dict):
        for key, value in (schema.get("properties") or {}).items():
            yield f"{path}.{key}", value
        for key, value in schema.items():
            if key not in ("allOf", "oneOf", "if", "not", "properties"):
                yield from _declared(value, f"{path}/{key}")
            if key == "properties":
                for name, sub in value.items():
                    yield from _declared(sub, f"{path}.{name}")
    elif isinstance(schema, list):
        for i, value in enumerate(schema):
            yield from _declared(value, f"{path}[{i}]")


def _branches_of_checks() -> dict[str, dict[str, Any]]:
    return {rule["then"]["title"]: rule["then"] for rule in SCHEMA["$defs"]["CheckSpec"]["allOf"]}


def test_every_field_has_a_description() -> None:
    missing = [where for where, prop in _declared(SCHEMA) if "description" not in prop]
    branches = _branches_of_checks()
    for title, branch in branches.items():
        missing += [
            f"{title}.{key}"
            for key, prop in branch["properties"].items()
            if prop != {"type": "null"} and "description" not in prop
        ]
    assert missing == []
    # a threshold's description is its pydantic field's
    from pytest_infercheck.checks.determinism.spec import DeterminismThresholds

    described = branches["determinism check"]["properties"]["min_determinism"]["description"]
    assert described == DeterminismThresholds.model_fields["min_determinism"].description
    assert described.startswith("Suite gate: the least determinism score")


def test_each_kind_has_a_closed_branch_of_its_own_keys() -> None:
    branches = _branches_of_checks()
    assert list(branches) == [f"{kind.name} check" for kind in KINDS]
    for kind in KINDS:
        branch = branches[f"{kind.name} check"]
        taken = [k for k, v in branch["properties"].items() if v != {"type": "null"}]
        assert taken == ["name", "suites", kind.name, *kind.spec.thresholds.model_fields]
        assert branch["additionalProperties"] is False


def test_the_schema_flags_a_threshold_of_another_kind_at_its_key() -> None:
    """``max_kl`` under determinism: the determinism branch names the key (an editor
    underlines it), as load_matrix does at its line."""
    data = {**STUB, "checks": [{"determinism": "m", "max_kl": 0.1}]}
    assert "$.checks[0]: Additional properties are not allowed ('max_kl' was unexpected)" in (
        schema_errors(data)
    )
    assert (
        schema_errors(
            {**STUB, "checks": [{"compare": {"baseline": "m", "test": "m"}, "max_kl": 0.1}]}
        )
        == []
    )
