"""What a ``backends:`` entry may hold, per backend kind: the kind's spec.

Each kind names its spec on its line of :mod:`.registry` (:attr:`~.kind.BackendKind.spec`):
a model of exactly the keys its engine honours. A key that another kind takes and this one
would ignore is an error at its line naming the kinds that take it (``dtype is an option of
mlx-lm backends, not of a vllm backend``), as a threshold of another check kind is
(:func:`~pytest_infercheck.config.unused_thresholds`); see :func:`.registry.backend_spec`.

Which kind honours which shared key, as read from each kind's ``create`` and the code that
reads the entry:

- ``chat``: every kind (each has a chat and a raw path; see :attr:`BackendSpec.chat`);
- ``url``, ``serve``, ``env``, ``health_path``, ``startup_timeout``, ``api_key_env``,
  ``timeout``, ``max_concurrency``, ``retries``: every server kind (:class:`ServedSpec`:
  :meth:`~.http.HttpSettings.of` and :mod:`~pytest_infercheck.servers`); ``env``,
  ``health_path`` and ``startup_timeout`` only with ``serve`` (a server the plugin starts);
- ``model_name``: the kinds that name the model in their requests (openai, vllm, vllm-mlx,
  sglang, ollama); llama-server serves the model it was started with and names none;
- ``logprobs``: the kinds that negotiate logprobs on the OpenAI endpoints (openai, vllm,
  vllm-mlx: :class:`~.openai_compat.OpenAICompatBackend`); sglang reads its native
  ``/generate``, which this switch never reached;
- ``add_bos``: mlx-lm in-process and vllm (raw prompts);
- ``dtype``, ``batching`` and the options of :class:`~.options.MlxLmOptionKeys`: mlx-lm
  in-process.

Code that handles every kind reads the shared keys of :class:`BackendSpec` (``url``,
``serve``, ``api_key_env``, ``logprobs``, ``batching``): a kind whose entry does not take the
key answers what its engine does (an in-process engine has no ``url``; a kind without a
``logprobs:`` switch is asked for logprobs wherever it gives them).

Light on purpose (pydantic only): the registry imports it without any engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ..strict import Strict
from .options import BackendOptions, MlxLmOptionKeys, MlxLmOptions
from .serve_command import serve_problems


class BackendSpec(Strict):
    """An engine: the base of every kind's spec (:mod:`.spec`).

    ``chat``: use the chat template (mlx-lm default: when the tokenizer has one; an
    OpenAI-compatible server or Ollama: its chat endpoint unless ``chat: false``;
    llama-server and SGLang: raw prompts unless ``chat: true``)."""

    kind: str
    """The backend kind: mlx-lm, openai, vllm, vllm-mlx, sglang, llama-server or ollama."""
    chat: bool | None = None
    """Use the chat template (default: mlx-lm when the tokenizer has one; OpenAI-compatible
    servers and Ollama yes; llama-server and SGLang no)."""

    if TYPE_CHECKING:
        # Read by code that handles every kind; see the module docstring.
        @property
        def url(self) -> str | None: ...
        @property
        def serve(self) -> str | None: ...
        @property
        def api_key_env(self) -> str | None: ...
        @property
        def logprobs(self) -> bool: ...
        @property
        def batching(self) -> bool: ...

    @property
    def options(self) -> BackendOptions | None:
        """The kind's own options as its engine takes them (None: it has none)."""
        return None

    def problems(self) -> list[tuple[str, str]]:
        """``(key, message)`` for each combination of keys the engine cannot run."""
        return []

    @model_validator(mode="after")
    def _runnable(self) -> Self:
        """Each of :meth:`problems` is an error at its key (its YAML line)."""
        errors = [error_at(key, why, getattr(self, key, None)) for key, why in self.problems()]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


def error_at(key: str, message: str, value: Any) -> InitErrorDetails:
    """A validation error at an entry's ``key`` (its YAML line), saying ``message``."""
    return InitErrorDetails(
        type=PydanticCustomError("backend_option", "{message}", {"message": message}),
        loc=(key,),
        input=value,
    )


class _LogprobsAsked:
    """A kind without a ``logprobs:`` switch: its engine is asked for logprobs wherever it
    gives them."""

    @property
    def logprobs(self) -> bool:
        return True


class InProcessSpec(BackendSpec, _LogprobsAsked):
    """An engine that runs in this process: no ``url``, no ``serve``, no API key."""

    @property
    def url(self) -> None:
        return None

    @property
    def serve(self) -> None:
        return None

    @property
    def api_key_env(self) -> None:
        return None


SERVE_ONLY = ("env", "health_path", "startup_timeout")
"""The keys of a server the plugin starts (``serve``): nothing reads them beside ``url``."""


class ServedSpec(BackendSpec):
    """An engine served over HTTP: attached at ``url``, or started by the plugin with
    ``serve`` (``{model}``, ``{port}`` filled in, other braces kept; ``env`` added), waited
    for on ``health_path`` up to ``startup_timeout`` seconds and stopped once no remaining
    item needs it. ``api_key_env``: the environment variable holding the API key (never the
    key itself). ``timeout`` (seconds per request), ``max_concurrency`` (requests in flight
    at once) and ``retries`` (of a failed connection or a 5xx) drive its HTTP client."""

    url: str | None = Field(default=None, pattern=r"^https?://")
    """Attach to a running server at this URL (http:// or https://); or give serve."""
    serve: str | None = None
    """A command that starts the server, with {model} and {port} filled in; or give url."""
    env: dict[str, str] = Field(default_factory=dict)
    """Environment variables added for the serve command."""
    health_path: str = "/health"
    """The path polled until the started server is ready (default /health)."""
    startup_timeout: float = Field(default=180.0, gt=0)
    """Seconds to wait for a started server to be ready (default 180)."""
    api_key_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    """The environment variable holding the API key (never the key itself)."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds per request (default 120)."""
    max_concurrency: int = Field(default=4, ge=1)
    """Requests in flight at once (default 4)."""
    retries: int = Field(default=4, ge=0)
    """Retries of a failed connection, a timeout, a 429 or a 503 (default 4)."""

    @property
    def batching(self) -> bool:
        """A server has no in-process generations for the comparisons to batch: nothing for
        the matrix to forbid (whether they batch is the lockstep's question, in-process)."""
        return True

    @field_validator("serve")
    @classmethod
    def _serve_command(cls, value: str | None) -> str | None:
        problems = [] if value is None else serve_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
        return value

    @model_validator(mode="after")
    def _url_or_serve(self) -> Self:
        if (self.url is None) == (self.serve is None):
            raise ValueError(
                f"a {self.kind} backend needs exactly one of 'url' (attach to a running "
                "server) or 'serve' (a command with {model} and {port} to start one)"
            )
        return self

    def problems(self) -> list[tuple[str, str]]:
        if self.serve is not None or self.url is None:
            return []
        return [
            (
                key,
                f"{key} applies to a server the plugin starts ('serve'); one attached at "
                "'url' runs as it was started",
            )
            for key in SERVE_ONLY
            if key in self.model_fields_set
        ]


class _ModelName(Strict):
    """``model_name``: the ``model`` field sent to the server (default: the model's
    ``served_name``, else its path or repo)."""

    model_name: str | None = None
    """The model field sent to the server (default: the model's served_name, else its path or
    repo)."""


class OpenAIServerSpec(_ModelName, ServedSpec):
    """An OpenAI-compatible server (``openai``, ``vllm``, ``vllm-mlx``): its chat endpoint, or
    ``/v1/completions`` with ``chat: false``. ``logprobs: false``: the server is not asked
    for logprobs (one whose logprobs are known to be wrong, such as mlx_lm.server 0.32.2's
    unsorted top-k: its text and answers are compared, and the items say why)."""

    logprobs: bool = True
    """Ask the server for logprobs (default true); false compares text and answers only."""


class VllmSpec(OpenAIServerSpec):
    """vLLM's OpenAI server. ``add_bos`` (raw prompts, ``chat: false``): prepend the
    tokenizer's BOS when vLLM's ``/tokenize`` gives ids without it (a tokenizer whose
    post-processor adds none, such as the tiny adder's), as mlx-lm's ``add_bos`` and
    llama.cpp's ``add_bos_token`` do; default false: vLLM's own ids."""

    add_bos: bool = False
    """Prepend the tokenizer's BOS to raw prompts whose ids lack it (default false)."""


class LlamaServerSpec(ServedSpec, _LogprobsAsked):
    """llama.cpp's ``llama-server``: raw prompts on ``/completion`` unless ``chat: true``; it
    serves the model it was started with (no ``model_name``)."""


class SglangSpec(_ModelName, ServedSpec, _LogprobsAsked):
    """SGLang: raw prompts on its native ``/generate`` unless ``chat: true``."""


class OllamaSpec(_ModelName, ServedSpec, _LogprobsAsked):
    """Ollama: ``/api/chat`` unless ``chat: false`` (``/api/generate``); ``model_name``
    defaults to the model's ``name:tag``."""


class MlxLmSpec(MlxLmOptionKeys, InProcessSpec):
    """mlx-lm in this process. ``add_bos``: prepend the tokenizer's BOS when the rendered
    prompt lacks it. ``dtype``: cast the loaded weights (``float32`` for a reference).
    ``batching``: whether the comparisons may batch this backend's generations (after a
    probe shows batching changes nothing); false: one prompt at a time. Its generation
    options (``draft_model``, ``kv_bits``, ...) are those of
    :class:`~.options.MlxLmOptionKeys`."""

    add_bos: bool = True
    """Prepend the tokenizer's BOS when the rendered prompt lacks it (default true)."""
    dtype: Literal["float32", "bfloat16", "float16"] | None = None
    """Cast the loaded weights (float32 for a reference, bfloat16, float16)."""
    batching: bool = True
    """Whether the comparisons may batch this backend's generations (default true)."""

    @property
    def options(self) -> MlxLmOptions:
        """The generation options written on the entry (those unwritten stay unset)."""
        keys = MlxLmOptionKeys.model_fields
        written = {k for k in self.model_fields_set if k in keys}
        return MlxLmOptions.model_construct(written, **{k: getattr(self, k) for k in keys})

    def problems(self) -> list[tuple[str, str]]:
        return self.option_problems()
