"""The YAML matrix as pydantic models: models, backends, suites, settings and checks.

Every error names the file, the line and the field (``infercheck.yaml:14: checks[0].compare
.test: unknown model 'q5'``); the plugin shows it as a collection error, not a traceback.

The check entries are assembled from the registry of kinds (:func:`check_model`), a backend
entry is its kind's spec (:func:`.backends.registry.backend_spec`); the models that need no
kind, and the Protocols through which the code below this module reads the matrix, are in
:mod:`.matrix`.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    PlainValidator,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from .adapters import adapter_engages, adapter_problem
from .backends.registry import BACKENDS, backend_kind, backend_spec, validate_backend_entry
from .backends.spec import BackendSpec as BackendSpec
from .backends.spec import ServedSpec
from .checks.framework.kind import CheckKind, RateGate
from .checks.registry import KIND_NAMES, kind_named
from .golden.names import GOLDEN_NAME, GOLDEN_PLACE
from .matrix import ModelSpec as ModelSpec
from .matrix import Settings as Settings
from .matrix import SuiteRef as SuiteRef
from .matrix import Target as Target
from .matrix import parse_model_shorthand as parse_model_shorthand
from .metrics.stats import wilson_interval, wilson_min_trials
from .specs import KindThresholds, Side, _Strict
from .strict import unknown_key
from .yamlpos import PositionedYaml, SourceError, format_loc, load_positioned

if TYPE_CHECKING:
    from . import matrix as view
    from .suites import Suite

BackendEntry = Annotated[
    BackendSpec,
    PlainValidator(
        validate_backend_entry,
        json_schema_input_type=Union[tuple(dict.fromkeys(k.spec for k in BACKENDS))],  # noqa: UP007
    ),
]
"""A ``backends:`` entry: validated by its kind's spec (:func:`.backends.registry.backend_spec`)."""


class CheckEntry(_Strict):
    """One entry of ``checks:``: exactly one kind key (its options: the kind's ``spec``) plus
    its kind's thresholds, an optional ``name`` and ``suites``. :func:`check_model` adds one
    optional field per kind of the registry and the thresholds of those kinds; a threshold
    that the entry's own kind does not declare is refused by :func:`load_matrix` at its
    line (:func:`unused_thresholds`)."""

    name: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_.+-]+$")
    suites: list[SuiteRef] | None = None

    @field_validator("suites", mode="before")
    @classmethod
    def _suite_shorthand(cls, value: Any) -> Any:
        return _suite_list(value)

    @model_validator(mode="after")
    def _one_kind(self) -> CheckEntry:
        kinds = [name for name in KIND_NAMES if self.spec_of(name) is not None]
        if len(kinds) != 1:
            raise ValueError(f"a check needs exactly one of {', '.join(KIND_NAMES)}")
        return self

    def spec_of(self, kind: str) -> Any:
        """The options of kind ``kind`` (``batch-invariance`` -> ``self.batch_invariance``)."""
        return getattr(self, field_name(kind), None)

    @property
    def kind(self) -> str:
        return self.check_kind.name

    @property
    def check_kind(self) -> CheckKind:
        """The kind of this check, from the registry."""
        kind = kind_named(next(n for n in KIND_NAMES if self.spec_of(n) is not None))
        assert kind is not None
        return kind

    @property
    def spec(self) -> Any:
        """The options under the kind key."""
        return self.spec_of(self.kind)

    def kind_thresholds(self) -> KindThresholds:
        """The thresholds this check is held to: its kind's model (:attr:`CheckKind
        .thresholds`) of the thresholds written, defaults for the others."""
        model = self.check_kind.spec.thresholds
        written = self.model_fields_set & set(model.model_fields)
        return model.model_validate(self.model_dump(include=written))

    def thresholds(self) -> dict[str, Any]:
        """The thresholds this check is held to, as plain types (for reports): its kind's
        only, those without a value left out."""
        return self.kind_thresholds().model_dump(exclude_none=True)

    def baseline_side(self, index: int) -> Side:
        """The baseline's ref and where it is written (a single-target check: its target)."""
        return self.spec.baseline_side(("checks", index, self.kind))

    def test_sides(self, index: int) -> list[Side]:
        """The sides compared with the baseline, in the user's order (none for a
        single-target check)."""
        return self.spec.test_sides(("checks", index, self.kind))


def field_name(kind: str) -> str:
    """The Python field of a kind's YAML key: ``batch-invariance`` -> ``batch_invariance``."""
    return kind.replace("-", "_")


@functools.cache
def check_model(kinds: frozenset[str]) -> type[CheckEntry]:
    """:class:`CheckEntry` with one optional field per kind in ``kinds`` (its YAML key as
    alias, its ``spec`` as type), in the registry's order. Building it imports those kinds'
    modules only; :func:`load_matrix` asks for the kinds its file uses."""
    used = [_kind(name) for name in KIND_NAMES if name in kinds]
    fields: dict[str, Any] = {
        field_name(kind.name): (kind.spec.options | None, Field(default=None, alias=kind.name))
        for kind in used
    }
    for kind in used:
        for key, info in kind.spec.thresholds.model_fields.items():
            fields.setdefault(key, (info.annotation, info))
    return create_model("CheckSpec", __base__=CheckEntry, __doc__=CheckEntry.__doc__, **fields)


def _kind(name: str) -> CheckKind:
    kind = kind_named(name)
    assert kind is not None
    return kind


def threshold_users() -> dict[str, list[str]]:
    """Every threshold key of the registry's kinds and the kinds that use it, in the
    registry's order (imports every kind: for error messages)."""
    users: dict[str, list[str]] = {}
    for name in KIND_NAMES:
        for key in _kind(name).spec.thresholds.model_fields:
            users.setdefault(key, []).append(name)
    return users


def unused_thresholds(check: CheckEntry, raw: Any) -> list[tuple[str, str]]:
    """``(key, message)`` for each key of the raw check entry ``raw`` that is a threshold of
    some kind but not of this check's kind: ``stress does not use max_kl (compare, sweep,
    diff do)``."""
    mine = check.check_kind.spec.thresholds.model_fields
    own = {*CheckEntry.model_fields, *(field_name(k) for k in KIND_NAMES), *KIND_NAMES}
    others = [k for k in (raw if isinstance(raw, dict) else {}) if k not in mine and k not in own]
    if not others:
        return []  # the usual case: no other kind's module is imported
    users = threshold_users()
    return [(key, not_used(check.kind, key, users[key])) for key in others if key in users]


def not_used(kind: str, key: str, users: list[str]) -> str:
    """``stress does not use max_kl (compare, sweep, diff do)``."""
    verb = "do" if len(users) > 1 else "does"
    return f"{kind} does not use {key} ({', '.join(users)} {verb})"


def _suite_list(value: Any) -> Any:
    """Accept ``[reasoning, {suite: x.jsonl, limit: 5}]`` as well as full mappings."""
    if not isinstance(value, list):
        return value
    return [{"suite": item} if isinstance(item, str) else item for item in value]


class MatrixFields(_Strict):
    """Every section of ``infercheck.yaml`` but ``checks`` (see :func:`matrix_model`)."""

    models: dict[str, ModelSpec] = Field(min_length=1)
    backends: dict[str, BackendEntry] = Field(
        default_factory=lambda: {"local": backend_spec({"kind": "mlx-lm"})}
    )
    suites: list[SuiteRef] = Field(min_length=1)
    settings: Settings = Settings()

    @field_validator("suites", mode="before")
    @classmethod
    def _suite_shorthand(cls, value: Any) -> Any:
        return _suite_list(value)


@functools.cache
def matrix_model(kinds: frozenset[str]) -> type[Matrix]:
    """The model of a whole ``infercheck.yaml`` whose checks use ``kinds``:
    :class:`MatrixFields` + ``checks: list[check_model(kinds)]`` (at least one)."""
    checks: Any = list[check_model(kinds)]  # type: ignore[misc]
    fields: dict[str, Any] = {"checks": (checks, Field(min_length=1))}
    model = create_model(
        "Matrix", __base__=MatrixFields, __doc__="The whole ``infercheck.yaml``.", **fields
    )
    return cast("type[Matrix]", model)


def kinds_used(data: Any) -> frozenset[str]:
    """The kind keys (of the registry) that the raw ``checks:`` entries of ``data`` use."""
    checks = data.get("checks") if isinstance(data, dict) else None
    if not isinstance(checks, list):
        return frozenset()
    return frozenset(k for c in checks if isinstance(c, dict) for k in c if k in KIND_NAMES)


if TYPE_CHECKING:
    CheckSpec = CheckEntry

    class Matrix(MatrixFields):
        """The whole ``infercheck.yaml``."""

        checks: list[CheckSpec]

else:

    def __getattr__(name: str) -> Any:
        """``CheckSpec`` and ``Matrix`` with every kind (imports them all: the JSON Schema,
        tests); :func:`load_matrix` builds the models of the kinds its file uses."""
        if name == "CheckSpec":
            return check_model(frozenset(KIND_NAMES))
        if name == "Matrix":
            return matrix_model(frozenset(KIND_NAMES))
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
        ``golden:NAME``."""
        if ref.startswith("golden:"):
            name = ref.removeprefix("golden:")
            if not GOLDEN_NAME.fullmatch(name):
                raise self.source.error(
                    loc, f"{ref!r}: a golden name is letters, digits and . _ + - only"
                )
            return Target(model=f"golden.{name}", backend="golden", golden=name)
        model, _, backend = ref.partition("@")
        if not backend:
            if len(self.matrix.backends) != 1:
                raise self.source.error(
                    loc, f"{ref!r} needs '@backend' (backends: {_names(self.matrix.backends)})"
                )
            backend = next(iter(self.matrix.backends))
        if model not in self.matrix.models:
            raise self.source.error(
                loc, f"unknown model {model!r} (models: {_names(self.matrix.models)})"
            )
        if backend not in self.matrix.backends:
            raise self.source.error(
                loc, f"unknown backend {backend!r} (backends: {_names(self.matrix.backends)})"
            )
        return Target(model=model, backend=backend)

    def model_source(self, name: str, kind: str = "mlx-lm") -> tuple[str, str | None]:
        """What a backend of ``kind`` is given for model ``name`` (local paths resolved
        against the YAML's folder), and the hub revision if any: its ``gguf`` for a kind that
        loads one, else a server's ``served_name`` if given, else ``path`` or ``repo``."""
        spec = self.matrix.models[name]
        facts = backend_kind(kind)
        assert facts is not None  # validated
        if facts.loads == "gguf":
            if spec.gguf is None:
                raise self.source.error(("models", name), f"a {kind} needs 'gguf' for {name!r}")
            return self._local(spec.gguf), None
        if facts.server and spec.served_name is not None:
            return spec.served_name, None
        if spec.path is not None:
            return self._local(spec.path), None
        if spec.repo is not None:
            return spec.repo, spec.revision
        raise self.source.error(
            ("models", name), f"a {kind} backend needs 'path' or 'repo' for {name!r}"
        )

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
        "Repo id must be in the form ...")."""
        for index, check in enumerate(self.matrix.checks):
            for side in [check.baseline_side(index), *check.test_sides(index)]:
                target = self.target(side.ref, side.loc)
                if target.golden is None:
                    self._check_local(target.model, self.matrix.backends[target.backend])

    def _check_local(self, name: str, backend: BackendSpec) -> None:
        if isinstance(backend, ServedSpec) and backend.serve is None:
            return  # a running server holds the model
        spec = self.matrix.models[name]
        kind = backend_kind(backend.kind)
        assert kind is not None  # validated
        field = kind.loads
        value = spec.gguf if field == "gguf" else spec.path
        if value is not None and not Path(self._local(value)).exists():
            what = "file" if field == "gguf" else "folder"
            hub = "" if field == "gguf" else "; a hub model is written `repo: org/name`"
            raise self.source.error(
                ("models", name, field),
                f"{value} does not exist (the {what} {self._local(value)}{hub})",
            )
        adapter = self.model_adapter(name, backend.kind)
        if adapter is not None and not Path(adapter).exists():
            raise self.source.error(
                ("models", name, "adapter"), f"the adapter {adapter} does not exist"
            )

    @property
    def golden_dir(self) -> Path:
        """The folder of the golden files (``golden_dir``, relative to the matrix); see
        :func:`.golden.golden_path`."""
        return Path(self._local(self.matrix.settings.golden_dir))

    def _local(self, path_text: str) -> str:
        path = Path(path_text).expanduser()
        return str(path if path.is_absolute() else (self.base_dir / path).resolve())


def _names(mapping: dict[str, Any]) -> str:
    return ", ".join(sorted(mapping)) or "none"


def load_matrix(path: Path) -> LoadedMatrix:
    """Read and validate ``path``; raises :class:`SourceError` naming file, line and field of
    every error the file has (one pass: the user sees them all at once)."""
    source = load_positioned(path)
    if not isinstance(source.data, dict):
        raise SourceError(path, 1, "the file must be a mapping with models, suites and checks")
    try:
        matrix = matrix_model(kinds_used(source.data)).model_validate(
            source.data, context={"base_dir": path.parent}
        )
    except ValidationError as exc:
        raise SourceError.of(
            [source.error(*_error_message(source.data, e)) for e in exc.errors()]
        ) from None
    loaded = LoadedMatrix(source, matrix)
    errors: list[SourceError] = []
    for i, check in enumerate(matrix.checks):
        raw = source.data["checks"][i]
        errors += [
            source.error(("checks", i, key), why) for key, why in unused_thresholds(check, raw)
        ]
        try:
            thresholds = check.kind_thresholds()
        except ValidationError as exc:  # a value the kind's own model refuses
            errors += [
                source.error(*_error_message(source.data, e, ("checks", i))) for e in exc.errors()
            ]
        else:
            if getattr(thresholds, "require_engaged", False) and not _declares_a_feature(
                matrix, check
            ):
                errors.append(source.error(("checks", i, "require_engaged"), NOTHING_TO_ENGAGE))
        baseline = check.baseline_side(i)
        for side in [baseline, *check.test_sides(i)]:
            try:
                target = loaded.target(side.ref, side.loc)
            except SourceError as err:
                errors.append(err)
                continue
            if target.golden is not None and (
                side is not baseline or not check.spec.golden_baseline
            ):
                errors.append(source.error(side.loc, GOLDEN_PLACE))
            elif target.golden is None and (
                why := adapter_problem(matrix, target.model, target.backend)
            ):
                errors.append(source.error(side.loc, why))
    if errors:
        raise SourceError.of(errors)
    return loaded


def _error_message(
    data: Any, error: Any, within: tuple[str | int, ...] = ()
) -> tuple[tuple[str | int, ...], str]:
    """Where a pydantic error is in the YAML (its location under ``within``) and what to tell
    the user: an unknown key with the nearest known one, a threshold of another kind with the
    kinds that use it."""
    loc = (*within, *_yaml_loc(tuple(p for p in error["loc"] if isinstance(p, str | int))))
    if error["type"] != "extra_forbidden" or not loc or not isinstance(loc[-1], str):
        return loc, str(error["msg"])
    if len(loc) == 3 and loc[0] == "checks" and isinstance(loc[1], int):
        users = threshold_users().get(loc[-1])
        entry = data["checks"][loc[1]]
        kinds = [k for k in KIND_NAMES if isinstance(entry, dict) and k in entry]
        if users and len(kinds) == 1:
            return loc, not_used(kinds[0], str(loc[-1]), users)
    return loc, unknown_key_message(loc)


NOTHING_TO_ENGAGE = (
    "true, but none of the check's backends declares a feature (a model's LoRA adapter, "
    "mlx-lm draft_model/kv_bits, or a serve command's --speculative-config, "
    "--kv-cache-dtype, -md, -ctk/-ctv): the gate would never apply"
)


def _declares_a_feature(matrix: MatrixFields, check: CheckEntry) -> bool:
    """Whether a backend of ``check`` (a diff's ``backends``) turns on a feature whose
    engagement ``require_engaged`` can judge (:func:`.features.declared_features`)."""
    from .features import declared_features

    model = getattr(check.spec, "model", "")
    for entry in getattr(check.spec, "backends", []):
        name, _, backend = entry.rpartition("@") if "@" in entry else (model, "", entry)
        spec = matrix.backends.get(backend)
        if spec is None:
            continue
        if declared_features(spec) or adapter_engages(matrix, name, spec.kind):
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


def unknown_key_message(loc: tuple[str | int, ...]) -> str:
    """``unknown key 'max_kll' (did you mean 'max_kl'?)`` for the key at the end of ``loc``,
    suggesting the nearest key the mapping it is in accepts."""
    return unknown_key(str(loc[-1]), keys_at(loc[:-1]))


def keys_at(loc: tuple[str | int, ...]) -> list[str]:
    """The keys the mapping at ``loc`` of a matrix accepts (YAML spelling), found by walking
    the models' fields from :class:`Matrix` (every kind: an error path, so importing all kinds
    is fine); empty where ``loc`` leads to no model."""
    model: type[BaseModel] = matrix_model(frozenset(KIND_NAMES))
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        info = _field(model, part)
        if info is None:
            return []
        annotation = info.annotation
        if get_origin(annotation) in (dict, list) and parts:
            parts.pop(0)  # a model name, a list index
        found = _models_in(annotation)
        if not found:
            return []
        model = found[0]
    return [info.alias or name for name, info in model.model_fields.items()]


def _field(model: type[BaseModel], key: str | int) -> FieldInfo | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            return info
    return None


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in get_args(annotation) for m in _models_in(arg)]


def _yaml_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop pydantic's union/tag segments (e.g. ``function-after[...]``) from a location."""
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))


if TYPE_CHECKING:

    def _satisfies(loaded: LoadedMatrix) -> view.LoadedMatrix:
        """The type checker's proof that config's classes (the loaded matrix, its
        :class:`Matrix`, its check entries) satisfy the Protocols of :mod:`.matrix`."""
        return loaded
