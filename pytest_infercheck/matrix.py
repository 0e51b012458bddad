"""The matrix as the code below :mod:`.config` sees it: what the framework, the check kinds,
the generation cache and the goldens read of ``infercheck.yaml``.

:mod:`.config` builds the matrix: its check entries are assembled from the registry of kinds
(so config sits above the kinds, and nothing the kinds import may import it). What needs no
kind lives here: the models of ``models:``, ``suites:`` and ``settings:`` (:class:`ModelSpec`,
:class:`SuiteRef`, :class:`Settings`), a resolved :class:`Target`, and the Protocols that
config's classes satisfy (:class:`CheckSpec`: one entry of ``checks:``; :class:`Matrix`: the
whole file; :class:`LoadedMatrix`: the file with its source, resolving references). A kind
annotates with these (``from ..matrix import CheckSpec, LoadedMatrix, Settings``), never with
config's classes. A backend's entry is its kind's spec (:mod:`.backends.spec`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import Field, StrictBool, field_validator, model_validator

from .backends.registry import SHORTHANDS
from .strict import Strict as _Strict

if TYPE_CHECKING:
    from .backends.spec import BackendSpec
    from .specs import KindThresholds, Side
    from .yamlpos import PositionedYaml


class AdapterSpec(_Strict):
    """A LoRA adapter applied to a model: ``path`` (a folder: mlx-lm's adapter folder for
    mlx-lm, a PEFT folder for vLLM; one folder may hold both) or ``gguf`` (a GGUF LoRA file
    for llama-server). A plain string is the ``gguf`` when it ends in ``.gguf``, else the
    ``path``. Each backend kind that applies adapters reads the field its engine loads (the
    kind's ``loads``); a kind that cannot apply one refuses the model at collection."""

    path: str | None = None
    """The adapter folder (mlx-lm adapter files and/or PEFT files), relative to the YAML
    file; read by mlx-lm and vLLM."""
    gguf: str | None = None
    """The GGUF LoRA file, relative to the YAML file; read by llama-server."""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if isinstance(value, str):
            return {"gguf": value} if value.endswith(".gguf") else {"path": value}
        return value

    @model_validator(mode="after")
    def _some_source(self) -> AdapterSpec:
        if self.path is None and self.gguf is None:
            raise ValueError("give the adapter's 'path' (a folder) or 'gguf' (a file)")
        return self


class ModelSpec(_Strict):
    """Where each kind of backend finds a model.

    ``path`` (a local mlx/Hugging Face folder) or ``repo`` (a hub id, with ``revision``) for
    mlx-lm, mlx_lm.server and vllm-mlx; ``gguf`` (a file) for llama-server; ``served_name`` for
    a server that knows the model by name (an OpenAI model id, an Ollama ``name:tag``).
    ``quantization`` is a label. The infer-check shorthand is accepted as a plain string:
    ``mlx:DIR``, ``gguf:FILE``, ``ollama:NAME:TAG``, ``vllm-mlx:DIR``, ``openai:NAME``, or a
    bare value detected as a ``.gguf`` file, an ``org/name`` hub repo, an Ollama ``name:tag``,
    or else a folder. ``adapter``: a LoRA adapter applied on top (:class:`AdapterSpec`).
    """

    path: str | None = None
    """A local model folder (mlx or Hugging Face), relative to the YAML file."""
    repo: str | None = None
    """A Hugging Face hub id (org/name)."""
    revision: str | None = None
    """The hub revision of repo (a branch, tag or commit)."""
    gguf: str | None = None
    """A GGUF file (llama-server), relative to the YAML file."""
    served_name: str | None = None
    """The name a server knows the model by (an OpenAI model id, an Ollama name:tag)."""
    quantization: str | None = None
    """A label shown in reports (4bit, q4_k_m, ...)."""
    adapter: AdapterSpec | None = None
    """A LoRA adapter applied to the model (a folder or a GGUF file, or {path, gguf})."""

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


class SuiteRef(_Strict):
    """A bundled suite name or a path to a JSONL/YAML suite, with an optional prompt limit."""

    suite: str
    """A bundled suite name, or a path to a .jsonl/.yaml suite relative to the YAML file."""
    limit: int | None = Field(default=None, gt=0)
    """Only the first this many prompts of the suite."""


class Settings(_Strict):
    """Run-wide settings; the command line and ini file override these.

    Golden baselines (see :mod:`.golden`): ``golden_dir`` (folder of the golden files,
    relative to the matrix), ``golden_gzip`` (record ``.json.gz`` instead of ``.json``),
    ``golden_top_k`` (most logprobs recorded per position). ``record`` is set by
    ``--infercheck-record`` only.
    """

    num_prompts: int | None = Field(default=None, gt=0)
    """Only the first this many prompts of every suite."""
    max_tokens: int | None = Field(default=None, gt=0)
    """Tokens generated per prompt, over every prompt's own max_tokens."""
    default_max_tokens: int = Field(default=256, gt=0)
    """Tokens generated for a prompt that sets no max_tokens (default 256)."""
    thinking: bool = False
    """Let a thinking model think (its chat template's enable_thinking; default false)."""
    seed: int | None = None
    """The sampling seed sent with every request."""
    golden_dir: str = "goldens"
    """The folder of the golden files, relative to the YAML file (default goldens)."""
    golden_gzip: bool = False
    """Record golden files as .json.gz (default .json)."""
    golden_top_k: int = Field(default=20, ge=1, le=1000)
    """The most logprobs recorded per position in a golden file (default 20)."""
    record: bool = False
    batching: bool = True
    """Whether comparisons may batch in-process generations at all
    (``--infercheck-no-batching`` turns it off)."""
    fail_on_degenerate: StrictBool = False
    """Whether a degenerate output (a loop or a stutter, :mod:`.metrics.degenerate`) fails
    its item; off: it is counted and shown only (random-weight test models loop)."""
    title: str | None = Field(default=None, min_length=1)
    """The HTML report's title and the GitHub job summary's heading (``--infercheck-title``
    overrides it); default: the matrix's file name."""

    @field_validator("record")
    @classmethod
    def _record_is_an_option(cls, value: bool) -> bool:
        if value:
            raise ValueError("recording is a command-line option: pytest --infercheck-record")
        return value


class Target(_Strict):
    """A ``model@backend`` pair, the unit a check runs; or a golden baseline
    (``golden:NAME``, model ``golden.NAME``), replayed from its file."""

    model: str
    backend: str
    golden: str | None = None

    @property
    def label(self) -> str:
        return f"golden:{self.golden}" if self.golden else f"{self.model}@{self.backend}"


class CheckSpec(Protocol):
    """One entry of ``checks:`` (:class:`.config.CheckEntry` with its kind's fields)."""

    @property
    def name(self) -> str | None: ...

    @property
    def suites(self) -> Sequence[SuiteRef] | None: ...

    @property
    def kind(self) -> str:
        """The kind's YAML key (``compare``)."""
        ...

    @property
    def spec(self) -> Any:
        """The options under the kind key (the kind's own model)."""
        ...

    def kind_thresholds(self) -> KindThresholds:
        """The thresholds the check is held to (the kind's own model)."""
        ...

    def thresholds(self) -> dict[str, Any]:
        """The thresholds as plain types (for reports), those without a value left out."""
        ...

    def baseline_side(self, index: int) -> Side:
        """The baseline's ref and where it is written (a single-target check: its target)."""
        ...

    def test_sides(self, index: int) -> list[Side]:
        """The sides compared with the baseline (none for a single-target check)."""
        ...


class Matrix(Protocol):
    """The whole ``infercheck.yaml`` (:class:`.config.Matrix`)."""

    @property
    def models(self) -> Mapping[str, ModelSpec]: ...

    @property
    def backends(self) -> Mapping[str, BackendSpec]: ...

    @property
    def suites(self) -> Sequence[SuiteRef]: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def checks(self) -> Sequence[CheckSpec]: ...


class LoadedMatrix(Protocol):
    """A validated matrix with its source (:class:`.config.LoadedMatrix`)."""

    @property
    def source(self) -> PositionedYaml: ...

    @property
    def matrix(self) -> Matrix: ...

    @property
    def path(self) -> Path: ...

    @property
    def base_dir(self) -> Path: ...

    @property
    def golden_dir(self) -> Path:
        """The folder of the golden files (``golden_dir``, relative to the matrix)."""
        ...

    def target(self, ref: str, loc: tuple[str | int, ...]) -> Target:
        """Resolve ``model@backend`` (or ``model`` when there is one backend), or
        ``golden:NAME``; a :class:`~.yamlpos.SourceError` at ``loc`` when it cannot be."""
        ...

    def model_source(self, name: str, kind: str = "mlx-lm") -> tuple[str, str | None]:
        """What a backend of ``kind`` is given for model ``name``, and its hub revision."""
        ...

    def model_adapter(self, name: str, kind: str) -> str | None:
        """The LoRA adapter a backend of ``kind`` applies to model ``name`` (None: none)."""
        ...

    def check_local_models(self) -> None:
        """Every model a check loads on this machine exists (else a ``SourceError``)."""
        ...
