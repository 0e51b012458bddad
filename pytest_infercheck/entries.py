"""The pydantic models of ``infercheck.yaml`` as assembled from the registries: a backend
entry is its kind's spec, a check entry has one optional field per check kind and the
thresholds of those kinds (:func:`check_model`), the whole file is :func:`matrix_model`; and
what an error message needs of them (the keys a mapping accepts, the kinds a threshold
belongs to). :mod:`.config` loads a file with them and re-exports them.
"""

from __future__ import annotations

import functools
import inspect
from typing import TYPE_CHECKING, Annotated, Any, Union, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    PlainValidator,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from .backends.registry import BACKENDS, backend_spec, validate_backend_entry
from .backends.spec import BackendSpec
from .checks.framework.kind import CheckKind
from .checks.registry import KIND_NAMES, kind_named
from .matrix import ModelSpec, Settings, SuiteRef
from .specs import KindThresholds, Side, _Strict
from .strict import unknown_key

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
    """The check's name in item ids (default: its kind's label, e.g. compare(bf16-vs-q4))."""
    suites: list[SuiteRef] | None = None
    """The suites of this check (default: the matrix's suites)."""

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
    used = [kind_of(name) for name in KIND_NAMES if name in kinds]
    fields: dict[str, Any] = {
        field_name(kind.name): (
            kind.spec.options | None,
            Field(default=None, alias=kind.name, description=_first_paragraph(kind.spec.options)),
        )
        for kind in used
    }
    for kind in used:
        for key, info in kind.spec.thresholds.model_fields.items():
            fields.setdefault(key, (info.annotation, info))
    return create_model("CheckSpec", __base__=CheckEntry, __doc__=CheckEntry.__doc__, **fields)


def _first_paragraph(cls: type) -> str:
    """The first paragraph of a class's docstring, on one line."""
    return " ".join(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].split())


def kind_of(name: str) -> CheckKind:
    kind = kind_named(name)
    assert kind is not None
    return kind


def threshold_users() -> dict[str, list[str]]:
    """Every threshold key of the registry's kinds and the kinds that use it, in the
    registry's order (imports every kind: for error messages)."""
    users: dict[str, list[str]] = {}
    for name in KIND_NAMES:
        for key in kind_of(name).spec.thresholds.model_fields:
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
    """The models, by name: each a mapping (path, repo, gguf, served_name) or a shorthand
    string."""
    backends: dict[str, BackendEntry] = Field(
        default_factory=lambda: {"local": backend_spec({"kind": "mlx-lm"})}
    )
    """The engines, by name (default: local, an in-process mlx-lm)."""
    suites: list[SuiteRef] = Field(min_length=1)
    """The prompt suites every check runs (a check may give its own)."""
    settings: Settings = Settings()
    """Run-wide settings; the command line and ini file override them."""

    @field_validator("suites", mode="before")
    @classmethod
    def _suite_shorthand(cls, value: Any) -> Any:
        return _suite_list(value)


@functools.cache
def matrix_model(kinds: frozenset[str]) -> type[Matrix]:
    """The model of a whole ``infercheck.yaml`` whose checks use ``kinds``:
    :class:`MatrixFields` + ``checks: list[check_model(kinds)]`` (at least one)."""
    checks: Any = list[check_model(kinds)]  # type: ignore[misc]
    what = (
        "The checks: each entry has exactly one kind key (its options) and its kind's thresholds."
    )
    fields: dict[str, Any] = {"checks": (checks, Field(min_length=1, description=what))}
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


def yaml_loc(loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """Drop pydantic's union/tag segments (e.g. ``function-after[...]``) from a location."""
    return tuple(p for p in loc if not (isinstance(p, str) and "[" in p))
