"""The YAML matrix loaded: models, backends, suites, settings and checks, validated.

Every error names the file, the line and the field (``infercheck.yaml:14: checks[0].compare
.test: unknown model 'q5'``); the plugin shows it as a collection error, not a traceback, and
:func:`load_matrix` says every mistake of a file at once (one mistake, one error).

The models are in :mod:`.entries` (re-exported here): the check entries are assembled from
the registry of kinds (:func:`check_model`), a backend entry is its kind's spec
(:func:`.backends.registry.backend_spec`); the models that need no kind, and the Protocols
through which the code below this module reads the matrix, are in :mod:`.matrix`; what the
entries name is checked by :mod:`.references`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from .adapters import adapter_engages, adapter_problem
from .backends.registry import backend_kind, backend_spec
from .backends.spec import BackendSpec as BackendSpec
from .backends.spec import ServedSpec
from .checks.framework.kind import RateGate
from .checks.registry import KIND_NAMES
from .entries import BackendEntry as BackendEntry
from .entries import CheckEntry as CheckEntry
from .entries import MatrixFields as MatrixFields
from .entries import check_model as check_model
from .entries import field_name as field_name
from .entries import keys_at as keys_at
from .entries import kind_of as kind_of
from .entries import kinds_used as kinds_used
from .entries import matrix_model as matrix_model
from .entries import not_used as not_used
from .entries import threshold_users as threshold_users
from .entries import unknown_key_message as unknown_key_message
from .entries import unused_thresholds as unused_thresholds
from .entries import yaml_loc
from .golden.names import GOLDEN_PLACE
from .matrix import ModelSpec as ModelSpec
from .matrix import Settings as Settings
from .matrix import SuiteRef as SuiteRef
from .matrix import Target as Target
from .matrix import parse_model_shorthand as parse_model_shorthand
from .metrics.stats import wilson_interval, wilson_min_trials
from .references import (
    errors_at,
    local_problem,
    model_problem,
    resolve_ref,
    suite_problem,
)
from .strict import nearest, plain_message, unknown_key
from .yamlpos import Loc, PositionedYaml, SourceError, format_loc, load_positioned

if TYPE_CHECKING:
    from . import matrix as view
    from .entries import CheckSpec as CheckSpec
    from .entries import Matrix as Matrix
    from .suites import Suite
else:

    def __getattr__(name: str) -> Any:
        """``CheckSpec`` and ``Matrix`` with every kind (:mod:`.entries`)."""
        from . import entries

        if name in ("CheckSpec", "Matrix"):
            return getattr(entries, name)
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class LoadedMatrix:
    """A validated matrix with its source, so later errors can still name a line."""

    def __init__(self, source: PositionedYaml, matrix: Matrix) -> None:
        self.source = source
        self.matrix = matrix
        self.path = source.path

    @property
    def base_dir(self) -> Path:
        return self.path.parent

    def target(self, ref: str, loc: tuple[str | int, ...]) -> Target:
        """Resolve ``model@backend`` (or ``model`` when there is one backend), or
        ``golden:NAME`` (:func:`.references.resolve_ref`)."""
        return resolve_ref(self.source, ref, loc, self.matrix.models, self.matrix.backends)

    def model_source(self, name: str, kind: str = "mlx-lm") -> tuple[str, str | None]:
        """What a backend of ``kind`` is given for model ``name`` (local paths resolved
        against the YAML's folder), and the hub revision if any: its ``gguf`` for a kind that
        loads one, else a server's ``served_name`` if given, else ``path`` or ``repo``
        (:func:`.references.model_problem` says when there is none)."""
        spec = self.matrix.models[name]
        facts = backend_kind(kind)
        assert facts is not None  # validated
        problem = model_problem(name, spec, kind)
        if problem is not None:
            raise self.source.error(("models", name), problem)
        if facts.loads == "gguf":
            assert spec.gguf is not None
            return self._local(spec.gguf), None
        if facts.server and spec.served_name is not None:
            return spec.served_name, None
        if spec.path is not None:
            return self._local(spec.path), None
        return str(spec.repo), spec.revision

    def model_adapter(self, name: str, kind: str) -> str | None:
        """The LoRA adapter a backend of ``kind`` applies to model ``name``: the adapter's
        field that the kind loads (``gguf`` for llama-server, ``path`` otherwise), resolved
        against the YAML's folder; None when the model has no adapter. The matrix has
        refused an adapter on a kind without adapters, or without the field it loads
        (:func:`adapter_problem`)."""
        adapter = self.matrix.models[name].adapter
        facts = backend_kind(kind)
        if adapter is None or facts is None:
            return None
        value = adapter.gguf if facts.loads == "gguf" else adapter.path
        return None if value is None else self._local(value)

    def check_local_models(self) -> None:
        """Every model a check runs on a backend that loads it from this machine (mlx-lm
        in-process, or a server the plugin starts with ``serve``) exists here: a missing
        ``path`` folder or ``gguf`` file is a :class:`SourceError` at the model's line, said
        before any backend starts (mlx-lm would read a missing folder as a hub id and answer
        "Repo id must be in the form ..."). ``load_matrix(path, on_this_machine=True)`` says
        it with the file's other mistakes."""
        errors = _problems(
            self.source, _Parts.of(self.matrix), self.base_dir, local=True, suites=False
        )
        if errors:
            raise SourceError.of(errors)

    @property
    def golden_dir(self) -> Path:
        """The folder of the golden files (``golden_dir``, relative to the matrix); see
        :func:`.golden.golden_path`."""
        return Path(self._local(self.matrix.settings.golden_dir))

    def _local(self, path_text: str) -> str:
        return _local_path(self.base_dir, path_text)


def load_matrix(path: Path, *, on_this_machine: bool = False) -> LoadedMatrix:
    """Read and validate ``path``; raises one :class:`SourceError` naming file, line and
    field of every mistake the file has, in file order: its keys and values, what its checks
    name (models, backends, a model a backend cannot load), and with ``on_this_machine``
    (collection) the suites and local model files it names and the gates its checks can
    never measure or the options they refuse (:func:`check_measurable`). One mistake is one error: a
    reference to a model whose entry is wrong, the thresholds of a misspelt kind, a missing
    key that a misspelt one beside it names, are not errors of their own."""
    source = load_positioned(path)
    if not isinstance(source.data, dict):
        raise SourceError(path, 1, "the file must be a mapping with models, suites and checks")
    kinds = kinds_used(source.data)
    context = {"base_dir": path.parent}
    errors: list[SourceError] = []
    try:
        matrix: Matrix | None = matrix_model(kinds).model_validate(source.data, context=context)
    except ValidationError as exc:
        matrix = None
        errors += [source.error(loc, why) for loc, why in _pydantic_errors(source.data, exc)]
    parts = _Parts.of(matrix) if matrix is not None else _Parts.raw(source.data, kinds, context)
    errors += _problems(source, parts, path.parent, local=on_this_machine, suites=on_this_machine)
    if on_this_machine:
        errors += _unmeasurable(source, parts, matrix)
    if errors:
        unique = {(e.line, e.reason): e for e in errors}
        raise SourceError.of(list(unique.values()))
    assert matrix is not None
    return LoadedMatrix(source, matrix)


@dataclass
class _Parts:
    """The sections of a matrix as far as they validate: every model and backend name the
    file gives (None: the section is not a mapping, so no reference to it is judged), the
    entries that validate on their own, and each check entry that validates on its own
    (None: it has errors of its own)."""

    model_names: Collection[str] | None
    models: Mapping[str, ModelSpec]
    backend_names: Collection[str] | None
    backends: Mapping[str, BackendSpec]
    checks: list[CheckEntry | None]

    @classmethod
    def of(cls, matrix: Matrix) -> _Parts:
        checks: list[CheckEntry | None] = list(matrix.checks)
        return cls(matrix.models, matrix.models, matrix.backends, matrix.backends, checks)

    @classmethod
    def raw(cls, data: dict[str, Any], kinds: frozenset[str], context: Any) -> _Parts:
        models = data.get("models")
        backends = data.get("backends", {"local": {"kind": "mlx-lm"}})
        checks = data.get("checks")
        entry = check_model(kinds)
        return cls(
            list(models) if isinstance(models, dict) else None,
            _valid(models, ModelSpec.model_validate),
            list(backends) if isinstance(backends, dict) else None,
            _valid(backends, lambda raw: backend_spec(raw, context)),
            [_one(entry, raw, context) for raw in checks] if isinstance(checks, list) else [],
        )


def _unmeasurable(
    source: PositionedYaml, parts: _Parts, matrix: Matrix | None
) -> list[SourceError]:
    """What :func:`check_measurable` refuses of each check whose entry and targets are
    valid (of a file with other mistakes too: the valid models and backends, as far as the
    matrix goes)."""
    if matrix is None:
        matrix = matrix_model(frozenset()).model_construct(
            models=dict(parts.models), backends=dict(parts.backends), checks=[]
        )
    loaded = LoadedMatrix(source, matrix)
    errors: list[SourceError] = []
    for index, check in enumerate(parts.checks):
        sides = [] if check is None else [check.baseline_side(index), *check.test_sides(index)]
        if check is None or not all(_usable(parts, side.ref) for side in sides):
            continue
        try:
            check_measurable(loaded, check, index)
        except SourceError as err:
            errors += err.each()
    return errors


def _usable(parts: _Parts, ref: str) -> bool:
    """Whether ``ref`` names a golden file, or a valid model on a valid backend."""
    if ref.startswith("golden:"):
        return True
    model, _, backend = ref.partition("@")
    names = list(parts.backend_names or [])
    backend = backend or (names[0] if len(names) == 1 else "")
    return model in parts.models and backend in parts.backends


def _valid(section: Any, validate: Any) -> dict[str, Any]:
    """The entries of a ``models:`` or ``backends:`` mapping that validate on their own."""
    found = {}
    for name, raw in section.items() if isinstance(section, dict) else ():
        try:
            found[name] = validate(raw)
        except (ValidationError, ValueError, TypeError, AttributeError):
            continue
    return found


def _one(model: type[CheckEntry], raw: Any, context: Any) -> CheckEntry | None:
    """Check entry ``raw`` validated on its own; failing that, its kind's options alone
    (what its sides name is still judged when a threshold beside them is wrong); None when
    those fail too."""
    keep = [*KIND_NAMES, "name", "suites"]
    for entry in (
        raw,
        {k: v for k, v in raw.items() if k in keep} if isinstance(raw, dict) else raw,
    ):
        try:
            return model.model_validate(entry, context=context)
        except ValidationError:
            continue
    return None


def _problems(
    source: PositionedYaml, parts: _Parts, base_dir: Path, *, local: bool, suites: bool
) -> list[SourceError]:
    """The mistakes of each check that validates (:func:`_check_problems`), each model a
    check's backend cannot load (:func:`.references.model_problem`), the suites not found
    (``suites``) and the local models missing (``local``)."""
    errors: list[SourceError] = []
    targets: list[Target] = []
    for index, check in enumerate(parts.checks):
        if check is not None:
            errors += _check_problems(source, parts, index, check, targets)
    found: list[tuple[Loc, str]] = []
    for target in targets:
        model, backend = parts.models.get(target.model), parts.backends.get(target.backend)
        problem = (
            None
            if model is None or backend is None
            else (model_problem(target.model, model, backend.kind))
        )
        if problem is not None:
            found.append((("models", target.model), problem))
        elif local:
            found += _missing_locally(parts, target, base_dir)
    if suites:
        for loc, ref in _suite_refs(source.data):
            why = suite_problem(ref, base_dir)
            if why is not None:
                found.append((loc, why))
    return errors + errors_at(source, found)


def _check_problems(
    source: PositionedYaml, parts: _Parts, i: int, check: CheckEntry, targets: list[Target]
) -> list[SourceError]:
    """The mistakes of check ``i`` beyond its own entry's keys: thresholds of another kind,
    values its kind refuses, a ``require_engaged`` with nothing to engage, what its sides
    name (appended to ``targets`` when they resolve), a golden file out of place."""
    raw = source.data["checks"][i]
    errors = [source.error(("checks", i, k), why) for k, why in unused_thresholds(check, raw)]
    try:
        thresholds = check.kind_thresholds()
    except ValidationError as exc:  # a value the kind's own model refuses
        for e in exc.errors():
            loc, why = _error_message(source.data, e, ("checks", i))
            errors += [source.error(loc, why)] if why is not None else []
    else:
        if getattr(thresholds, "require_engaged", False) and not _declares_a_feature(parts, check):
            errors.append(source.error(("checks", i, "require_engaged"), NOTHING_TO_ENGAGE))
    if parts.model_names is None or parts.backend_names is None:
        return errors
    baseline = check.baseline_side(i)
    for side in [baseline, *check.test_sides(i)]:
        try:
            target = resolve_ref(source, side.ref, side.loc, parts.model_names, parts.backend_names)
        except SourceError as err:
            errors.append(err)
            continue
        if target.golden is not None:
            if side is not baseline or not check.spec.golden_baseline:
                errors.append(source.error(side.loc, GOLDEN_PLACE))
        else:
            targets.append(target)
            if (
                target.model in parts.models
                and target.backend in parts.backends
                and (why := adapter_problem(parts, target.model, target.backend))
            ):
                errors.append(source.error(side.loc, why))
    return errors


def _missing_locally(parts: _Parts, target: Target, base_dir: Path) -> list[tuple[Loc, str]]:
    """The model of ``target`` if its backend loads it from this machine (mlx-lm, or a
    server the plugin starts) and its folder or file is not there."""
    model, backend = parts.models.get(target.model), parts.backends.get(target.backend)
    if model is None or backend is None:
        return []
    if isinstance(backend, ServedSpec) and backend.serve is None:
        return []  # a running server holds the model
    facts = backend_kind(backend.kind)
    value = None if facts is None else (model.gguf if facts.loads == "gguf" else model.path)
    local = None if value is None else _local_path(base_dir, value)
    problem = local_problem(model, backend.kind, local)
    found: list[tuple[Loc, str]] = (
        [] if problem is None else [(("models", target.model, problem[0]), problem[1])]
    )
    adapter = model.adapter
    if adapter is not None and facts is not None and facts.adapters:
        field = adapter.gguf if facts.loads == "gguf" else adapter.path
        path = None if field is None else _local_path(base_dir, field)
        if path is not None and not Path(path).exists():
            found.append(
                (("models", target.model, "adapter"), f"the adapter {path} does not exist")
            )
    return found


def _suite_refs(data: dict[str, Any]) -> list[tuple[Loc, str]]:
    """Every suite the file names (``suites:`` and each check's), with where."""
    found: list[tuple[Loc, str]] = []
    checks = data.get("checks")
    lists: list[tuple[Loc, Any]] = [(("suites",), data.get("suites"))]
    for i, check in enumerate(checks if isinstance(checks, list) else []):
        if isinstance(check, dict):
            lists.append((("checks", i, "suites"), check.get("suites")))
    for loc, refs in lists:
        for j, ref in enumerate(refs if isinstance(refs, list) else []):
            if isinstance(ref, str):
                found.append(((*loc, j), ref))
            elif isinstance(ref, dict) and isinstance(ref.get("suite"), str):
                found.append(((*loc, j, "suite"), ref["suite"]))
    return found


def _pydantic_errors(data: Any, exc: ValidationError) -> list[tuple[Loc, str]]:
    """Each error of the whole file's validation at its place, in our words
    (:func:`_error_message`), without follow-ons: the thresholds of a check whose kind is
    misspelt, and a missing key that a misspelt key beside it names."""
    errors = exc.errors()
    said = [_error_message(data, e) for e in errors]
    meant = {
        (*loc[:-1], hint)
        for error, (loc, _) in zip(errors, said, strict=True)
        if error["type"] == "extra_forbidden" and (hint := _meant(loc)) is not None
    }
    found: list[tuple[Loc, str]] = []
    for error, (loc, why) in zip(errors, said, strict=True):
        if why is not None and not (error["type"] == "missing" and loc in meant):
            found.append((loc, why))
    checks = data.get("checks")
    for i, entry in enumerate(checks if isinstance(checks, list) else []):
        if isinstance(entry, dict) and not _kinds_of(entry) and not any(map(_kind_typo, entry)):
            found.append((("checks", i), f"a check needs one of: {', '.join(KIND_NAMES)}"))
    return found


def _meant(loc: Loc) -> str | None:
    """The key a misspelt key at ``loc`` means (the nearest one its mapping accepts)."""
    if not loc or not isinstance(loc[-1], str):
        return None
    return nearest(loc[-1], keys_at(loc[:-1]))


def _kinds_of(entry: dict[str, Any]) -> list[str]:
    return [k for k in KIND_NAMES if k in entry]


def _kind_typo(key: Any) -> str | None:
    """The check kind a key that is none means (``compar``, ``Compare``), else None."""
    if not isinstance(key, str) or key in KIND_NAMES or key in CheckEntry.model_fields:
        return None
    if key in threshold_users():
        return None
    return nearest(key, KIND_NAMES)


def _local_path(base_dir: Path, path_text: str) -> str:
    path = Path(path_text).expanduser()
    return str(path if path.is_absolute() else (base_dir / path).resolve())


def _error_message(data: Any, error: Any, within: Loc = ()) -> tuple[Loc, str | None]:
    """Where a pydantic error is in the YAML (its location under ``within``) and what to tell
    the user (None: nothing, it follows from another): an unknown key with the nearest known
    one (ignoring case), a threshold of another kind with the kinds that use it, a misspelt
    check kind with the kind it means (and not its thresholds), else the error in our words
    (:func:`.strict.plain_message`)."""
    loc = (*within, *yaml_loc(tuple(p for p in error["loc"] if isinstance(p, str | int))))
    entry = None
    if len(loc) >= 2 and loc[0] == "checks" and isinstance(loc[1], int):
        checks = data.get("checks")
        entry = checks[loc[1]] if isinstance(checks, list) and loc[1] < len(checks) else None
    kinds = _kinds_of(entry) if isinstance(entry, dict) else []
    if error["type"] == "value_error" and len(loc) == 2 and isinstance(entry, dict) and not kinds:
        return loc, None  # said once, by _pydantic_errors
    if error["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return loc, plain_message(error)
    if len(loc) == 3 and isinstance(entry, dict):
        key = loc[-1]
        users = threshold_users().get(key)
        if users and len(kinds) == 1:
            return loc, not_used(kinds[0], key, users)
        if not kinds:
            if users:
                return loc, None  # a threshold of the kind the entry misspells
            if (kind := _kind_typo(key)) is not None:
                return loc, f"unknown check kind {key!r} (did you mean {kind!r}?)"
            return loc, unknown_key(key, [*KIND_NAMES, *CheckEntry.model_fields])
        if len(kinds) == 1:
            own = [*CheckEntry.model_fields, kinds[0]]
            return loc, unknown_key(key, own + list(kind_of(kinds[0]).spec.thresholds.model_fields))
    return loc, unknown_key_message(loc)


NOTHING_TO_ENGAGE = (
    "true, but none of the check's backends declares a feature (a model's LoRA adapter, "
    "mlx-lm draft_model/kv_bits, or a serve command's --speculative-config, "
    "--kv-cache-dtype, -md, -ctk/-ctv): the gate would never apply"
)


def _declares_a_feature(parts: _Parts, check: CheckEntry) -> bool:
    """Whether a backend of ``check`` (a diff's ``backends``) turns on a feature whose
    engagement ``require_engaged`` can judge (:func:`.features.declared_features`)."""
    from .features import declared_features

    model = getattr(check.spec, "model", "")
    for entry in getattr(check.spec, "backends", []):
        name, _, backend = entry.rpartition("@") if "@" in entry else (model, "", entry)
        spec = parts.backends.get(backend)
        if spec is None:
            continue
        if declared_features(spec) or adapter_engages(parts, name, spec.kind):
            return True
    return False


def check_rate_gates(loaded: LoadedMatrix, check: CheckSpec, index: int, suite: Suite) -> None:
    """Refuse a gate on a Wilson upper bound that cannot pass (see
    :attr:`.checks.framework.kind.SpecFacet.rate_gates`): with ``n`` trials in the whole
    selection of ``suite`` (after ``limit`` and ``num_prompts``, before sharding), zero events
    give the upper bound ``z^2 / (n + z^2)``; above ``max_rate`` the check fails whatever the engine
    does. A :class:`SourceError` at the limit's line says so, with the fewest trials that
    could pass. A gate over no trials is not judged (the kinds skip it), so not refused."""
    rate_gates = check.check_kind.spec.rate_gates
    for gate in rate_gates(check, suite) if rate_gates is not None else []:
        if gate.n <= 0:
            continue
        upper = wilson_interval(0, gate.n, gate.confidence)[1]
        if upper <= gate.max_rate:
            continue
        raise infeasible_gate(loaded, ("checks", index, *gate.field), gate, upper, suite.name)


def check_measurable(loaded: LoadedMatrix, check: CheckSpec, index: int) -> None:
    """Refuse a written gate whose measure the matrix alone shows can never be measured (the
    kind's ``SpecFacet.unmeasurable``: a KL gate on a backend that returns no logprobs): a
    :class:`SourceError` at the gate's line, naming it and why, for each such gate; and each
    option the kind's ``SpecFacet.refuse`` refuses (a request parameter the target's engine
    does not take), at its line."""
    refuse = check.check_kind.spec.refuse
    errors = [
        SourceError(loaded.path, loaded.source.line_of(loc), f"{format_loc(loc)}: {why}")
        for loc, why in (refuse(loaded, check, index) if refuse is not None else ())
    ]
    unmeasurable = check.check_kind.spec.unmeasurable
    reasons = unmeasurable(loaded, check, index) if unmeasurable is not None else {}
    thresholds = check.kind_thresholds()
    gates = {gate.key: gate for gate in check.check_kind.spec.gates}
    for key, reason in reasons.items():
        gate = gates.get(key)
        if gate is None or not gate.is_written(thresholds):
            continue
        loc: tuple[str | int, ...] = ("checks", index, *key.split("."))
        line = loaded.source.line_of(loc)
        errors.append(SourceError(loaded.path, line, f"{format_loc(loc)}: {reason}"))
    if errors:
        raise SourceError.of(errors)


def infeasible_gate(
    loaded: LoadedMatrix, loc: tuple[str | int, ...], gate: RateGate, upper: float, suite: str
) -> SourceError:
    """``checks[0].flips.max_rate 0.1 cannot pass with 30 answered prompts (suite addition):
    the 95% Wilson upper bound at 0 flips is 0.1135; it needs at least 35 answered prompts``."""
    need = wilson_min_trials(gate.max_rate, gate.confidence)
    enough = (
        "no number of trials is enough (use gate: point)"
        if need is None
        else f"it needs at least {need} {gate.unit}"
    )
    return SourceError(
        loaded.path,
        loaded.source.line_of(loc),
        f"{format_loc(loc)} {gate.max_rate:g} cannot pass with {gate.trials} (suite {suite}): "
        f"the {gate.confidence * 100:g}% Wilson upper bound at 0 {gate.events} is {upper:.4f}; "
        f"{enough}",
    )


if TYPE_CHECKING:

    def _satisfies(loaded: LoadedMatrix) -> view.LoadedMatrix:
        """The type checker's proof that config's classes (the loaded matrix, its
        :class:`Matrix`, its check entries) satisfy the Protocols of :mod:`.matrix`."""
        return loaded
