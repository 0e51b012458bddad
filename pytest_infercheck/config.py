"""The YAML matrix as pydantic models: models, backends, suites, settings and checks.

Every error names the file, the line and the field (``infercheck.yaml:14: checks[0].compare
.test: unknown model 'q5'``); the plugin shows it as a collection error, not a traceback.
"""

from __future__ import annotations

import difflib
import functools
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast, get_args, get_origin

from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    StrictBool,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import InitErrorDetails, PydanticCustomError

from .backends.options import BackendOptions
from .backends.registry import BACKEND_NAMES, BACKENDS, OPTION_OWNERS, SHORTHANDS, backend_kind
from .checks.framework.kind import CheckKind, RateGate
from .checks.registry import KIND_NAMES, kind_named
from .golden import GOLDEN_NAME, GOLDEN_PLACE
from .metrics.stats import wilson_interval, wilson_min_trials
from .servers import serve_problems
from .specs import KindThresholds, Side, _Strict
from .yamlpos import PositionedYaml, SourceError, format_loc, load_positioned

if TYPE_CHECKING:
    from .backends.kind import BackendKind
    from .suites import Suite


class ModelSpec(_Strict):
    """Where each kind of backend finds a model.

    ``path`` (a local mlx/Hugging Face folder) or ``repo`` (a hub id, with ``revision``) for
    mlx-lm, mlx_lm.server and vllm-mlx; ``gguf`` (a file) for llama-server; ``served_name`` for
    a server that knows the model by name (an OpenAI model id, an Ollama ``name:tag``).
    ``quantization`` is a label. The infer-check shorthand is accepted as a plain string:
    ``mlx:DIR``, ``gguf:FILE``, ``ollama:NAME:TAG``, ``vllm-mlx:DIR``, ``openai:NAME``, or a
    bare value detected as a ``.gguf`` file, an ``org/name`` hub repo, an Ollama ``name:tag``,
    or else a folder.
    """

    path: str | None = None
    repo: str | None = None
    revision: str | None = None
    gguf: str | None = None
    served_name: str | None = None
    quantization: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        return parse_model_shorthand(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _some_source(self) -> ModelSpec:
        if self.path is not None and self.repo is not None:
            raise ValueError("give 'path' or 'repo', not both")
        if not any((self.path, self.repo, self.gguf, self.served_name)):
            raise ValueError("give one of 'path', 'repo', 'gguf' or 'served_name'")
        return self


def parse_model_shorthand(spec: str) -> dict[str, str]:
    """``gguf:./m.gguf`` -> ``{"gguf": "./m.gguf"}`` and so on (see :class:`ModelSpec`; the
    prefixes are the backend registry's shorthands)."""
    prefix, sep, rest = spec.partition(":")
    field = SHORTHANDS[prefix].shorthand_field if sep and prefix in SHORTHANDS else None
    if field == "path":
        return (
            parse_model_shorthand(rest) if "/" in rest and not _is_local(rest) else {"path": rest}
        )
    if field is not None:
        return {field: rest}
    if spec.endswith(".gguf"):
        return {"gguf": spec}
    if re.fullmatch(r"[\w.-]+/[\w.-]+", spec) and not _is_local(spec):
        return {"repo": spec}
    if re.fullmatch(r"[\w.-]+:[\w.-]+", spec):
        return {"served_name": spec}
    return {"path": spec}


def _is_local(spec: str) -> bool:
    return spec.startswith((".", "/", "~"))


class BackendSpec(_Strict):
    """An engine.

    ``mlx-lm`` runs in-process. Server kinds (``openai``, ``vllm-mlx``) attach to ``url``.
    ``chat``: use the chat template (mlx-lm default: when the tokenizer has one; servers:
    ``/v1/chat/completions``, or ``/v1/completions`` with ``chat: false``). ``model_name``: the
    ``model`` field sent to a server (default: the model's path or repo). ``api_key_env``: the
    environment variable holding the API key (never the key itself). ``serve``: start the
    server with this command (``{model}``, ``{port}`` filled in, other braces kept; ``env``
    added), wait for ``health_path`` up to ``startup_timeout`` seconds, stop it once no
    remaining item needs it. ``logprobs: false``: an OpenAI-compatible server is not asked
    for logprobs (one whose logprobs are known to be wrong, such as mlx_lm.server 0.32.2's
    unsorted top-k: its text and answers are compared, and the items say why).

    A kind's own options (:mod:`.backends.options`, e.g. mlx-lm's ``draft_model`` and
    ``kv_bits``) are written flat on the entry and held in ``options``
    (:meth:`_kind_options`).
    """

    kind: str
    chat: bool | None = None
    add_bos: bool = True
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    url: str | None = Field(default=None, pattern=r"^https?://")
    serve: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    health_path: str = "/health"
    startup_timeout: float = Field(default=180.0, gt=0)
    model_name: str | None = None
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    timeout: float = Field(default=120.0, gt=0)
    max_concurrency: int = Field(default=4, ge=1)
    retries: int = Field(default=4, ge=0)
    logprobs: bool = True
    batching: bool = True
    """Whether the comparisons may batch this backend's in-process generations (after a
    probe shows batching changes nothing); false: one prompt at a time."""
    options: SerializeAsAny[BackendOptions] | None = None
    """The kind's own options (None: none written), lifted from the entry's flat keys."""

    @model_validator(mode="before")
    @classmethod
    def _kind_options(cls, data: Any, info: ValidationInfo) -> Any:
        """Lift the keys that are backend options (:data:`~.backends.registry.OPTION_OWNERS`)
        into ``options``, validated by the kind's model (a draft folder resolved against the
        YAML's folder, the validation context's ``base_dir``). An option of another kind, a
        refused value and a combination the engine cannot run are errors at their key."""
        if isinstance(data, dict) and "options" in data:
            raise ValueError("write a kind's options on the entry itself, not under 'options'")
        if not isinstance(data, dict) or not any(key in OPTION_OWNERS for key in data):
            return data
        kind = backend_kind(data.get("kind"))
        model = kind.options if kind is not None else None
        mine = {k: v for k, v in data.items() if model is not None and k in model.model_fields}
        errors = [
            _error_at(
                key,
                f"{key} is an option of {' and '.join(OPTION_OWNERS[key])} "
                f"backends, not of a {data.get('kind')} backend",
                value,
            )
            for key, value in data.items()
            if key in OPTION_OWNERS and key not in mine
        ]
        options = None
        if model is not None:
            try:
                options = model.model_validate(mine, context=info.context)
            except ValidationError as exc:
                errors += [_reraised(e) for e in exc.errors()]
            else:
                errors += [_error_at(k, why, mine.get(k)) for k, why in options.problems()]
        if errors:
            raise ValidationError.from_exception_data(cls.__name__, errors)
        rest = {k: v for k, v in data.items() if k not in OPTION_OWNERS}
        return {**rest, "options": options}

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str) -> str:
        if backend_kind(value) is None:
            raise ValueError(
                f"unknown backend kind {value!r} (known kinds: {', '.join(BACKEND_NAMES)})"
            )
        return value

    @field_validator("serve")
    @classmethod
    def _serve_command(cls, value: str | None) -> str | None:
        problems = [] if value is None else serve_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _server_needs_url(self) -> BackendSpec:
        server = self.backend_kind.server
        if server and (self.url is None) == (self.serve is None):
            raise ValueError(
                f"a {self.kind} backend needs exactly one of 'url' (attach to a running "
                "server) or 'serve' (a command with {model} and {port} to start one)"
            )
        if not server and (self.url is not None or self.serve is not None):
            raise ValueError(f"backend kind {self.kind!r} runs in-process: remove 'url'/'serve'")
        if not self.logprobs and not self.backend_kind.openai_logprobs:
            users = ", ".join(k.name for k in BACKENDS if k.openai_logprobs)
            raise ValueError(
                f"'logprobs: false' is not applied by a {self.kind} backend (only {users})"
            )
        return self

    @property
    def backend_kind(self) -> BackendKind:
        """This entry's kind, from the backend registry."""
        kind = backend_kind(self.kind)
        assert kind is not None  # validated
        return kind


def _error_at(key: str, message: str, value: Any) -> InitErrorDetails:
    """A validation error at the entry's ``key`` (its YAML line)."""
    return InitErrorDetails(
        type=PydanticCustomError("backend_option", "{message}", {"message": message}),
        loc=(key,),
        input=value,
    )


def _reraised(error: Any) -> InitErrorDetails:
    """An error of a kind's options model, kept at its key."""
    return _error_at(str(error["loc"][0]) if error["loc"] else "kind", error["msg"], error["input"])


class SuiteRef(_Strict):
    """A bundled suite name or a path to a JSONL/YAML suite, with an optional prompt limit."""

    suite: str
    limit: int | None = Field(default=None, gt=0)


class Settings(_Strict):
    """Run-wide settings; the command line and ini file override these.

    Golden baselines (see :mod:`.golden`): ``golden_dir`` (folder of the golden files,
    relative to the matrix), ``golden_gzip`` (record ``.json.gz`` instead of ``.json``),
    ``golden_top_k`` (most logprobs recorded per position). ``record`` is set by
    ``--infercheck-record`` only.
    """

    num_prompts: int | None = Field(default=None, gt=0)
    max_tokens: int | None = Field(default=None, gt=0)
    default_max_tokens: int = Field(default=256, gt=0)
    thinking: bool = False
    seed: int | None = None
    golden_dir: str = "goldens"
    golden_gzip: bool = False
    golden_top_k: int = Field(default=20, ge=1, le=1000)
    record: bool = False
    batching: bool = True
    """Whether comparisons may batch in-process generations at all
    (``--infercheck-no-batching`` turns it off)."""
    fail_on_degenerate: StrictBool = False
    """Whether a degenerate output (a loop or a stutter, :mod:`.metrics.degenerate`) fails
    its item; off: it is counted and shown only (random-weight test models loop)."""

    @field_validator("record")
    @classmethod
    def _record_is_an_option(cls, value: bool) -> bool:
        if value:
            raise ValueError("recording is a command-line option: pytest --infercheck-record")
        return value


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
    backends: dict[str, BackendSpec] = Field(
        default_factory=lambda: {"local": BackendSpec(kind="mlx-lm")}
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


class Target(_Strict):
    """A ``model@backend`` pair, the unit a check runs; or a golden baseline
    (``golden:NAME``, model ``golden.NAME``), replayed from its file."""

    model: str
    backend: str
    golden: str | None = None

    @property
    def label(self) -> str:
        return f"golden:{self.golden}" if self.golden else f"{self.model}@{self.backend}"


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
        if backend.backend_kind.server and backend.serve is None:
            return  # a running server holds the model
        spec = self.matrix.models[name]
        field = backend.backend_kind.loads
        value = spec.gguf if field == "gguf" else spec.path
        if value is None or Path(self._local(value)).exists():
            return
        what = "file" if field == "gguf" else "folder"
        hub = "" if field == "gguf" else "; a hub model is written `repo: org/name`"
        raise self.source.error(
            ("models", name, field),
            f"{value} does not exist (the {what} {self._local(value)}{hub})",
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
    "true, but none of the check's backends declares a feature (mlx-lm "
    "draft_model/kv_bits, or a serve command's --speculative-config, --kv-cache-dtype, -md, "
    "-ctk/-ctv): the gate would never apply"
)


def _declares_a_feature(matrix: MatrixFields, check: CheckEntry) -> bool:
    """Whether a backend of ``check`` (a diff's ``backends``) turns on a feature whose
    engagement ``require_engaged`` can judge (:func:`.features.declared_features`)."""
    from .features import declared_features

    names = getattr(check.spec, "backends", [])
    return any(declared_features(matrix.backends[n]) for n in names if n in matrix.backends)


def check_rate_gates(loaded: LoadedMatrix, check: CheckSpec, index: int, suite: Suite) -> None:
    """Refuse a gate on a Wilson upper bound that cannot pass (see
    :attr:`.checks.protocol.CheckKind.rate_gates`): with ``n`` trials in the whole selection of
    ``suite`` (after ``limit`` and ``num_prompts``, before sharding), zero events give the
    upper bound ``z^2 / (n + z^2)``; above ``max_rate`` the check fails whatever the engine
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
    :class:`SourceError` at the gate's line, naming it and why, for each such gate."""
    unmeasurable = check.check_kind.spec.unmeasurable
    if unmeasurable is None:
        return
    reasons = unmeasurable(loaded, check, index)
    if not reasons:
        return
    thresholds = check.kind_thresholds()
    gates = {gate.key: gate for gate in check.check_kind.spec.gates}
    errors = []
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
    key = str(loc[-1])
    allowed = keys_at(loc[:-1])
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    if not close and allowed:
        hint = f" (expected one of: {', '.join(sorted(allowed))})"
    return f"unknown key {key!r}{hint}"


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
