"""Repro bundles (``--infercheck-repro DIR``): a folder per failed infercheck item that an
engine's maintainers can run on its own.

``DIR/<safe node id>/`` holds:

- ``infercheck.yaml``: the item's matrix cut down to its check (its YAML entry as written,
  thresholds included) on one suite: the same models (local paths made absolute), backends
  (``serve:`` and ``url:`` kept; the values of ``env`` redacted, as in the results file) and
  effective settings (command-line overrides applied); ``suite.jsonl`` is named after the
  suite, so the node id is the same; ``pytest.ini`` makes the folder a rootdir. A prompt
  item's suite holds its prompt alone; any other item (a stress level, a hostile request, a
  sweep's self-check, an aggregate whose suite gates failed) gets the suite as it ran,
  since what it judges is the whole suite. ``pytest`` in the folder runs it again.
- ``requests.json``: the HTTP exchanges of the item's engine calls (bodies with token ids,
  decoded answers), found among the process's recorded exchanges
  (:func:`~..backends.http.record_exchanges`) by the prompt they carry (its text, or its
  token ids as the start of a list of ids): generations are prefetched for a whole suite
  before its first item asks, so the item running when a request went out does not say
  whose it is. Headers are not recorded (the API key travels only there); lists and
  mappings longer than :data:`LONG` entries but token ids (full-vocabulary rows) keep
  their first :data:`KEEP` entries and their count.
- ``engines.json`` (the engines' identities, as in the results file), ``record.json`` (the
  item as the results file holds it), ``BUG.md`` (title, environment, expected and actual,
  the first divergence with its margins where the record has them, the token ids, the
  command, a ``curl`` per server request).

A bundle is written to a temporary folder beside its place, then renamed into it. The value
of every backend's ``api_key_env`` found in the environment is replaced by ``<redacted>``
in every file, in case a server echoed it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .. import __version__
from ..backends.http import Exchange, record_exchanges
from ..nodeid import SEP, NodeId, in_file
from ..plain_data import plain
from .collector import REDACTED, redact, redact_urls

if TYPE_CHECKING:
    from ..collect import _InfercheckItem
    from ..config import LoadedMatrix
    from ..suites import Prompt

LONG = 100
"""A list or mapping with more entries than this in a recorded answer is summarised."""
KEEP = 20
"""How many entries of a summarised list or mapping are kept."""
MAX_NAME = 120
PACKAGES = ("pytest", "pytest-infercheck", "mlx", "mlx-lm", "numpy", "httpx", "transformers")
SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def summarise(value: Any) -> Any:
    """``value`` with every list of more than :data:`LONG` entries that are not all ints
    (token ids are kept) made ``[first KEEP entries..., "... N entries, KEEP kept"]``, and
    every mapping of more than :data:`LONG` keys made its first :data:`KEEP` items plus
    ``"...": "N entries, KEEP kept"``; recursively."""
    if isinstance(value, Mapping):
        items = list(value.items())
        if len(items) > LONG:
            kept = {str(k): summarise(v) for k, v in items[:KEEP]}
            return {**kept, "...": f"{len(items)} entries, {KEEP} kept"}
        return {str(k): summarise(v) for k, v in items}
    if isinstance(value, list | tuple):
        ids = all(isinstance(v, int) and not isinstance(v, bool) for v in value)
        if len(value) > LONG and not ids:
            return [*map(summarise, value[:KEEP]), f"... {len(value)} entries, {KEEP} kept"]
        return [summarise(v) for v in value]
    return value


class Recorder:
    """The HTTP exchanges of this process, summarised as they arrive (see
    :func:`~..backends.http.record_exchanges`)."""

    def __init__(self) -> None:
        self.exchanges: list[dict[str, Any]] = []

    def __call__(self, exchange: Exchange) -> None:
        entry = asdict(exchange)
        entry["response"] = summarise(entry["response"])
        self.exchanges.append(redact_urls(plain(entry)))

    def about(
        self, backends: set[str], texts: Iterable[str], ids: Iterable[list[int]]
    ) -> list[dict[str, Any]]:
        """The exchanges with one of ``backends`` whose request carries one of ``texts`` (as
        JSON text) or a list of ints that starts with one of ``ids``, in the order sent."""
        needles = [json.dumps(t, ensure_ascii=False)[1:-1] for t in texts if t]
        starts = [s for s in ids if len(s) > 1]
        return [
            e
            for e in self.exchanges
            if e["backend"] in backends
            and (
                any(n in json.dumps(e["request"], ensure_ascii=False) for n in needles)
                or any(_starts_with(q, s) for q in _int_lists(e["request"]) for s in starts)
            )
        ]


def _starts_with(seq: list[int], start: list[int]) -> bool:
    return len(seq) >= len(start) and seq[: len(start)] == start


def _int_lists(value: Any) -> Iterator[list[int]]:
    """Every list of ints in ``value``."""
    if isinstance(value, Mapping):
        value = list(value.values())
    elif not isinstance(value, list):
        return
    if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        yield value
    for v in value:
        yield from _int_lists(v)


def token_ids(data: Any, prefix: str = "") -> dict[str, list[int]]:
    """Every list of ints under a key ending in ``ids`` in a record's data, by its dotted
    key (``prompt_inputs.base_ids``)."""
    found: dict[str, list[int]] = {}
    if isinstance(data, Mapping):
        for key, value in data.items():
            name = f"{prefix}{key}"
            if str(key).endswith("ids") and isinstance(value, list) and value:
                if all(isinstance(v, int) for v in value):
                    found[name] = value
            else:
                found.update(token_ids(value, name + "."))
    return found


def fence(text: str, info: str = "") -> str:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in
    it (model output is untrusted text: it cannot close the block)."""
    runs = [len(r) for r in re.findall(r"`+", text)]
    ticks = "`" * max(3, max(runs, default=0) + 1)
    return f"{ticks}{info}\n{text}\n{ticks}\n"


def markdown_text(text: str) -> str:
    """``text`` on one line with Markdown's punctuation backslash-escaped (no markup, no
    HTML)."""
    return re.sub(r"([\\`*_{}\[\]<>()#+|!~-])", r"\\\1", " ".join(text.split()))


def safe_name(nodeid: str) -> str:
    """A folder name for a node id: runs of characters other than letters, digits and
    ``. _ -`` made ``_``; a long name cut, with 8 hex digits of its hash to stay unique."""
    node = NodeId.parse(nodeid)
    parts = node.parts if node is not None else nodeid.split(SEP)
    name = SAFE.sub("_", "-".join(parts)).strip("_.") or "item"
    if len(name) <= MAX_NAME:
        return name
    return f"{name[:MAX_NAME]}-{hashlib.sha256(nodeid.encode()).hexdigest()[:8]}"


def _absolute(path_text: str, base_dir: Path) -> str:
    path = Path(path_text).expanduser()
    return str(path if path.is_absolute() else (base_dir / path).resolve())


def bundle_matrix(loaded: LoadedMatrix, index: int, settings: Any, suite_file: str) -> Any:
    """The matrix of a bundle: check ``index`` of ``loaded`` (as written) on ``suite_file``
    alone, the same models (paths absolute), backends (``env`` values redacted) and
    ``settings`` (the effective ones: a pydantic ``Settings``)."""
    models = {}
    for name, spec in loaded.matrix.models.items():
        data = spec.model_dump(exclude_none=True)
        for field in ("path", "gguf"):
            if field in data:
                data[field] = _absolute(data[field], loaded.base_dir)
        models[name] = data
    backends = {
        name: spec.model_dump(exclude_defaults=True) | {"kind": spec.kind}
        for name, spec in loaded.matrix.backends.items()
    }
    written = settings.model_dump(exclude_defaults=True, exclude={"record", "num_prompts"})
    if "golden_dir" in written or any(
        str(ref).startswith("golden:") for ref in _values(loaded.source.data["checks"][index])
    ):
        written["golden_dir"] = _absolute(settings.golden_dir, loaded.base_dir)
    check = {k: v for k, v in dict(loaded.source.data["checks"][index]).items() if k != "suites"}
    matrix = {
        "models": models,
        "backends": backends,
        "suites": [suite_file],
        "settings": written,
        "checks": [plain(check)],
    }
    return redact(matrix)


def _values(value: Any) -> Iterator[Any]:
    if isinstance(value, Mapping):
        value = list(value.values())
    if isinstance(value, list):
        for v in value:
            yield from _values(v)
    else:
        yield value


def suite_row(prompt: Prompt) -> dict[str, Any]:
    """A prompt as a line of a JSONL suite."""
    row = {
        "id": prompt.id,
        "prompt": prompt.text,
        "category": prompt.category,
        "max_tokens": prompt.max_tokens,
        "answer": prompt.answer,
        "answer_kind": prompt.answer_kind,
        "system": prompt.system,
    }
    return {k: v for k, v in row.items() if v is not None}


def curl(exchange: Mapping[str, Any]) -> str:
    """The ``curl`` command of a recorded request; the API key is read from its environment
    variable, never written."""
    parts = [f"curl -sS -X {exchange['method']} '{exchange['url']}'"]
    env = exchange.get("api_key_env")
    if env:
        parts.append(f'-H "Authorization: Bearer ${env}"')
    if exchange.get("request") is None:
        return " \\\n  ".join(parts)
    body = json.dumps(exchange["request"], ensure_ascii=False)
    parts += ["-H 'Content-Type: application/json'", "-d @- <<'JSON'"]
    return " \\\n  ".join(parts) + f"\n{body}\nJSON"


def environment() -> dict[str, str]:
    """Python, platform and the versions of the packages a run depends on."""
    found = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    found.setdefault("pytest-infercheck", __version__)
    return found


def bug_markdown(
    nodeid: str,
    record: Mapping[str, Any],
    failure: str,
    engines: Mapping[str, Any],
    exchanges: list[dict[str, Any]],
    redacted_env: list[str],
) -> str:
    """``BUG.md`` of a bundle (every text from the run fenced, see :func:`fence`)."""
    data = record.get("data") or {}
    violations = list(record.get("violations") or [])
    title = violations[0] if violations else (failure.splitlines() or ["failed"])[0]
    out = [f"# {markdown_text(in_file(nodeid) + ': ' + title)}", ""]
    out += ["## Environment", ""]
    out += [f"- {k}: `{v}`" for k, v in environment().items()]
    out += ["", "Engines (also `engines.json`):", "", fence(json.dumps(engines, indent=2), "json")]
    out += ["## Expected and actual", "", "Expected: within the check's thresholds:", ""]
    out += [fence(json.dumps(record.get("thresholds") or {}, indent=2), "json")]
    out += ["Actual:", "", fence(failure or "\n".join(violations))]
    out += ["## First divergence", ""]
    divergence = {
        key: data[key]
        for key in ("first_divergence", "divergence_label", "margins", "noise_floor")
        if key in data
    }
    out += [fence(json.dumps(divergence, indent=2), "json") if divergence else "None recorded."]
    texts = {k: data[k] for k in ("base_text", "test_text") if isinstance(data.get(k), str)}
    for key, text in texts.items():
        out += ["", f"`{key}`:", "", fence(text)]
    ids = token_ids(data)
    if ids:
        out += ["", "## Token ids", ""]
        out += [fence("\n".join(f"{k}: {v}" for k, v in ids.items()))]
    out += ["", "## Reproduce", "", "In this folder:", "", fence("pytest", "sh")]
    out += [f"fails `{in_file(nodeid)}` again (matrix `infercheck.yaml`)."]
    if redacted_env:
        out += [f"The values of the backends' `env` were redacted: set {', '.join(redacted_env)}."]
    if exchanges:
        out += ["", "## Server requests", "", "As recorded in `requests.json`:", ""]
        for exchange in exchanges:
            out += [
                f"{exchange['backend']}: HTTP {exchange['status']}",
                "",
                fence(curl(exchange), "sh"),
            ]
    return "\n".join(out) + "\n"


def scrub(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every secret replaced by ``<redacted>``."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def write_bundle(folder: Path, files: Mapping[str, str]) -> None:
    """Write ``files`` (name -> text) as ``folder``, atomically: into a temporary folder
    beside it, then renamed into place (an older bundle there is replaced)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        for name, text in files.items():
            (tmp / name).write_text(text, encoding="utf-8")
        if folder.exists():
            old = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}.old."))
            os.replace(folder, old / "bundle")
            shutil.rmtree(old)
        os.replace(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def item_bundle(
    item: _InfercheckItem, report: pytest.TestReport, recorder: Recorder | None
) -> dict[str, str]:
    """The files of a failed item's bundle."""
    node = item.suite_node
    check = node.check_collector
    record = item.infercheck_record or item.infercheck_stub()
    plan = getattr(item, "plan", None)
    prompts: tuple[Prompt, ...] = node.suite.prompts
    if plan is not None and plan.role == "prompt":
        prompts = tuple(p for p in node.suite.prompts if p.id == plan.key) or prompts
    suite_file = f"{node.suite.name}.jsonl"
    matrix = bundle_matrix(check.loaded, check.index, check.settings, suite_file)
    engines = _engines(item)
    ids = list(token_ids(record.get("data")).values())
    loaded, spec, index = check.loaded, check.check, check.index
    sides = [spec.baseline_side(index), *spec.test_sides(index)]
    used = {loaded.target(side.ref, side.loc).backend for side in sides}
    texts = [p.text for p in prompts]
    exchanges = [] if recorder is None else recorder.about(used, texts, ids)
    failure = report.longreprtext
    redacted_env = sorted({k for b in matrix["backends"].values() for k in (b.get("env") or {})})
    entry = {"nodeid": item.nodeid, "outcome": report.outcome, "longrepr": failure, **record}
    import yaml

    files = {
        "infercheck.yaml": yaml.safe_dump(plain(matrix), sort_keys=False, allow_unicode=True),
        suite_file: "".join(json.dumps(suite_row(p), ensure_ascii=False) + "\n" for p in prompts),
        "pytest.ini": "[pytest]\ninfercheck_files = infercheck.yaml\n",
        "requests.json": _json(exchanges),
        "engines.json": _json(engines),
        "record.json": _json(entry),
        "BUG.md": bug_markdown(item.nodeid, record, failure, engines, exchanges, redacted_env),
    }
    envs = {b.api_key_env for b in loaded.matrix.backends.values()}
    envs |= {e["api_key_env"] for e in exchanges}
    secrets = [os.environ.get(env, "") for env in envs if env]
    return {name: scrub(text, secrets) for name, text in files.items()}


def _json(value: Any) -> str:
    return json.dumps(plain(value), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _engines(item: _InfercheckItem) -> dict[str, Any]:
    """The engines' identities of the item's check (as the results file holds them), or
    none when its run could not start (an engine that failed to load)."""
    try:
        context = item.suite_node.run().gatherer.context()
    except Exception:
        return {}
    engines: dict[str, Any] = redact_urls(plain(getattr(context, "engines", {}) or {}))
    return engines


RECORDER_KEY = pytest.StashKey[tuple[Recorder, Callable[[], None]]]()


def start_recording(config: pytest.Config) -> None:
    """Record this process's HTTP exchanges for its bundles, until :func:`stop_recording`."""
    recorder = Recorder()
    config.stash[RECORDER_KEY] = (recorder, record_exchanges(recorder))


def stop_recording(config: pytest.Config) -> None:
    entry = config.stash.get(RECORDER_KEY, None)
    if entry is not None:
        entry[1]()
        del config.stash[RECORDER_KEY]


def write_item_repro(item: pytest.Item, report: pytest.TestReport) -> None:
    """Write a failed infercheck item's bundle into ``--infercheck-repro`` and name it in the
    item's record (``repro``) and JUnit properties (``infercheck_repro``), as a path
    relative to the directory pytest was started in (absolute when outside it)."""
    from ..collect import _InfercheckItem

    if not isinstance(item, _InfercheckItem):
        return
    base = item.config.invocation_params.dir
    root = Path(item.config.getoption("infercheck_repro"))
    folder = (base / root / safe_name(item.nodeid)).resolve()
    entry = item.config.stash.get(RECORDER_KEY, None)
    write_bundle(folder, item_bundle(item, report, None if entry is None else entry[0]))
    shown = os.path.relpath(folder, base) if folder.is_relative_to(base) else str(folder)
    if item.infercheck_record is not None:
        item.infercheck_record["repro"] = shown
    item.user_properties.append(("infercheck_repro", shown))  # JUnit reads the teardown's
    report.user_properties.append(("infercheck_repro", shown))
