"""A backend kind's own options: keys written flat on its ``backends:`` entry beside the
shared ones (``kind``, ``chat``, ``serve``, ...), declared by the kind's spec
(:mod:`.spec`), and handed to its engine as one object (:class:`BackendOptions`).

mlx-lm's keys are a field group (:class:`MlxLmOptionKeys`) that its spec
(:class:`~.spec.MlxLmSpec`) and its options (:class:`MlxLmOptions`) share: an option of
another kind (``kv_bits`` on a llama-server) is an error at its line naming the kinds that
take it, a value the kind's model refuses an error at its line, and a combination the engine
cannot run (:meth:`MlxLmOptionKeys.option_problems`) an error at the key that makes it so.

Light on purpose (pydantic only): the registry imports it without the engine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator


class BackendOptions(BaseModel):
    """The base of a kind's options."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    def problems(self) -> list[tuple[str, str]]:
        """``(key, message)`` for each combination of options the engine cannot run."""
        return []

    def written(self) -> dict[str, object]:
        """The options written (for the backend's identity and error messages)."""
        return self.model_dump(exclude_unset=True)


class MlxLmOptionKeys(BaseModel):
    """mlx-lm's generation options (``mlx_lm.generate_step`` and
    ``speculative_generate_step``), applied on every path that generates or scores for the
    backend (:class:`~.mlx_lm.MlxLmBackend`).

    ``draft_model``: a model folder (relative to the YAML file, like models' paths) sharing
    the target's tokenizer: speculative decoding, ``num_draft_tokens`` drafted per step
    (mlx-lm's default 2; 0 drafts nothing: the draft is loaded and never used, an item
    ``unexercised``). ``kv_bits``: quantize the KV cache to this many bits (group size
    ``kv_group_size``, from the step at which the cache holds ``quantized_kv_start`` tokens:
    mlx-lm's default 5,000, so short prompts are never quantized unless it is lowered).
    ``prefill_step_size``: prompt tokens per prefill pass. ``max_kv_size``: a rotating KV
    cache of at most this many tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    draft_model: str | None = None
    """A draft model folder (relative to the YAML file) sharing the target's tokenizer:
    speculative decoding."""
    num_draft_tokens: int | None = Field(default=None, ge=0)
    """Tokens drafted per step with draft_model (mlx-lm's default 2; 0: none)."""
    kv_bits: Literal[2, 3, 4, 5, 6, 8] | None = None
    """Quantize the KV cache to this many bits (2, 3, 4, 5, 6 or 8)."""
    kv_group_size: Literal[32, 64, 128] | None = None
    """The group size of the KV cache's quantization (32, 64 or 128), with kv_bits."""
    quantized_kv_start: int | None = Field(default=None, ge=0)
    """The cache size in tokens from which the KV cache is quantized (mlx-lm's default 5000),
    with kv_bits."""
    prefill_step_size: int | None = Field(default=None, ge=1)
    """Prompt tokens per prefill pass."""
    max_kv_size: int | None = Field(default=None, ge=1)
    """A rotating KV cache of at most this many tokens."""

    @field_validator("draft_model")
    @classmethod
    def _draft_folder(cls, value: str | None, info: ValidationInfo) -> str | None:
        """Resolved against the YAML's folder (the validation context's ``base_dir``). Like a
        model's ``path``, it is not required to exist when the matrix loads (an example may be
        collected before its models are made); a missing folder fails the backend's items
        when it loads, naming the folder."""
        base = (info.context or {}).get("base_dir")
        if value is None or base is None:
            return value
        path = Path(value).expanduser()
        path = path if path.is_absolute() else (Path(base) / path).resolve()
        return str(path)

    def option_problems(self) -> list[tuple[str, str]]:
        """``(key, message)`` for each combination of these options mlx-lm cannot run."""
        out = []
        if self.num_draft_tokens is not None and self.draft_model is None:
            out.append(("num_draft_tokens", "num_draft_tokens needs draft_model"))
        if self.kv_bits is None:
            out += [
                (key, f"{key} needs kv_bits")
                for key in ("kv_group_size", "quantized_kv_start")
                if getattr(self, key) is not None
            ]
        if self.draft_model is not None and self.max_kv_size is not None:
            out.append(
                (
                    "max_kv_size",
                    "max_kv_size with draft_model: mlx-lm's speculative decoding needs a "
                    "trimmable cache, and a rotating one is not",
                )
            )
        if self.kv_bits is not None and self.max_kv_size is not None:
            out.append(
                ("kv_bits", "kv_bits with max_kv_size: mlx-lm cannot quantize a rotating cache")
            )
        if self.kv_bits is not None and self.draft_model is not None:
            out.append(
                (
                    "kv_bits",
                    "kv_bits with draft_model: mlx-lm quantizes a speculative decoder's cache "
                    "in a list of its own, so the bits in use cannot be read back; compare "
                    "each feature in a diff of its own",
                )
            )
        return out


class MlxLmOptions(MlxLmOptionKeys, BackendOptions):
    """mlx-lm's options as its engine takes them (:class:`~.mlx_lm.MlxLmBackend`): the
    keys of :class:`MlxLmOptionKeys` written on the entry (:attr:`~.spec.MlxLmSpec.options`)."""

    def problems(self) -> list[tuple[str, str]]:
        return self.option_problems()

    @property
    def draft_tokens(self) -> int:
        """Tokens drafted per step: ``num_draft_tokens``, else mlx-lm's default (2)."""
        return 2 if self.num_draft_tokens is None else self.num_draft_tokens

    @property
    def plain_cache(self) -> bool:
        """Whether the backend generates through mlx-lm's plain KV cache with its default
        prefill (no draft model, no quantized or rotating cache, no prefill step size): the
        only configuration the lockstep and ``BatchGenerator`` paths reproduce."""
        return not self.written()

    def cache_options(self) -> dict[str, Any]:
        """The keyword arguments of ``generate_step`` for the cache (those written)."""
        keys = ("kv_bits", "kv_group_size", "quantized_kv_start", "prefill_step_size")
        return {k: v for k in keys if (v := getattr(self, k)) is not None}
