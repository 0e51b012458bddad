"""Engine features that must change nothing (speculative decoding) or only within a budget
(a quantized KV cache), in one place: which features a backend declares, what an engine
reports of their activity, and whether a feature engaged on an item.

- :func:`declared_features`: the one place where "the feature" is known, from a backend's
  options (mlx-lm ``draft_model``, ``kv_bits``) or its ``serve:`` command (vLLM
  ``--speculative-config``, ``--kv-cache-dtype``; llama-server ``-md``/``--model-draft``/
  ``--spec-draft-model``, ``--spec-type`` other than ``none``, ``-ctk``/``--cache-type-k``,
  ``-ctv``/``--cache-type-v``);
- :class:`FeatureActivity`: what one generation's engine reported (drafted and accepted
  tokens, prompt tokens served from a cache, the KV bits in use), on the
  :class:`~pytest_infercheck.backends.base.Generation`;
- :func:`unexercised`: a declared feature that never engaged. A feature that never engaged
  proves nothing (a vLLM with ngram speculative decoding compares identical to plain
  decoding when no n-gram of the prompt ever matches: nothing was drafted);
- :class:`FeatureRecord`: a side's features and activity on a comparison item
  (``feature_activity``), with what did not engage.

Speculative decoding engages when at least one token is drafted: the target then verifies
the drafts in one multi-token pass, whose numerics differ from one-token decoding, and the
token after a rejected draft comes from that pass (accepted tokens are reported beside;
where the engine reports no drafted count, an accepted token shows it engaged). A KV cache
quantization engages, in-process, when the cache objects after the generation hold the
declared bits (mlx-lm quantizes only once the cache holds ``quantized_kv_start`` tokens); a
server's cache dtype applies to every request from its start, so it is engaged by
construction (``server-wide``), and the record's ``kv_bits`` are its declared bits where the
engine reports none (neither llama-server nor vLLM reports its cache type per request).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal

from .records import OMIT_WHEN_EMPTY

if TYPE_CHECKING:
    from .backends.spec import BackendSpec

FeatureName = Literal["speculative decoding", "KV cache quantization", "LoRA adapter"]
SPECULATIVE: Final = "speculative decoding"
KV_QUANTIZATION: Final = "KV cache quantization"
ADAPTER: Final = "LoRA adapter"


@dataclass(frozen=True)
class Feature:
    """One feature a backend declares."""

    name: FeatureName
    detail: str
    """How it is configured: ``draft model /m/draft, 3 tokens per step``, ``--speculative-
    config {...}``, ``4 bits from token 0``."""
    kv_bits: int | None = None
    """For a KV cache quantization: its bits (8 for fp8)."""
    server_wide: bool = False
    """Set for the whole server (its serve command): engaged on every request."""

    def describe(self) -> str:
        return f"{self.name} ({self.detail})"


@dataclass(frozen=True)
class FeatureActivity:
    """What the engine reported of one generation's features (None: not reported)."""

    drafted: int | None = None
    """Draft tokens proposed."""
    accepted: int | None = None
    """Draft tokens accepted (each one a token of the output)."""
    cache_hit_tokens: int | None = None
    """Prompt tokens served from a prefix cache."""
    kv_bits: int | None = None
    """The KV cache's bits in use after the generation (None: full precision or unknown)."""
    source: str = ""
    """Where the numbers come from (``mlx-lm speculative_generate_step (from_draft)``,
    ``vLLM /metrics delta``, ``llama-server timings``)."""
    adapter_differs: bool | None = None
    """Whether the generation with the LoRA adapter differs from the base model's on the
    same engine (:func:`adapter_differs`); None: not measured."""


def adapter_differs(adapted: Any, base: Any) -> bool:
    """Whether two generations (``Generation``: with the adapter, and the base model's on
    the same engine and prompt) differ: their token ids, else their texts, or their chosen
    tokens' logprobs (exactly: an adapter that changes no token still moves the
    distribution; a dropped one leaves every bit as the base's)."""
    if adapted.token_ids is not None and base.token_ids is not None:
        if list(adapted.token_ids) != list(base.token_ids):
            return True
    elif adapted.text != base.text:
        return True
    return bool(adapted.chosen_logprobs != base.chosen_logprobs)


@dataclass(frozen=True)
class FeatureRecord:
    """A side's declared features on a comparison item, its engine's activity on the item
    and what did not engage (``unexercised``: empty when every feature engaged)."""

    side: str
    """``baseline`` or ``test``."""
    target: str
    features: list[str]
    drafted: int | None = None
    accepted: int | None = None
    cache_hit_tokens: int | None = None
    kv_bits: int | None = None
    source: str = ""
    unexercised: list[str] = field(default_factory=list, metadata=OMIT_WHEN_EMPTY)


def feature_record(
    side: str, target: str, features: Sequence[Feature], activity: FeatureActivity | None
) -> FeatureRecord:
    """The item's record of one side with ``features`` (see :class:`FeatureRecord`); its
    ``kv_bits`` are the engine's, else a server-wide cache quantization's (engaged by
    construction: the module docstring)."""
    seen = activity or FeatureActivity()
    declared = [f.kv_bits for f in features if f.server_wide and f.kv_bits is not None]
    return FeatureRecord(
        side=side,
        target=target,
        features=[f.describe() for f in features],
        drafted=seen.drafted,
        accepted=seen.accepted,
        cache_hit_tokens=seen.cache_hit_tokens,
        kv_bits=seen.kv_bits if seen.kv_bits is not None else next(iter(declared), None),
        source=seen.source,
        unexercised=unexercised(features, activity),
    )


def unexercised(features: Sequence[Feature], activity: FeatureActivity | None) -> list[str]:
    """The declared ``features`` that did not engage on a generation with ``activity``, one
    sentence each (see the module docstring); a feature whose activity the engine does not
    report is listed too: it cannot be shown to have engaged."""
    out = []
    for feature in features:
        if feature.server_wide and feature.name == KV_QUANTIZATION:
            continue
        if feature.name == ADAPTER:
            differs = None if activity is None else activity.adapter_differs
            if differs is None:
                out.append(f"{ADAPTER}: the base model's output was not measured")
            elif not differs:
                out.append(
                    f"{ADAPTER} never engaged: the output equals the base model's on the same "
                    f"engine, token for token and logprob for logprob ({feature.detail})"
                )
        elif feature.name == SPECULATIVE:
            seen = activity or FeatureActivity()
            count = seen.drafted if seen.drafted is not None else seen.accepted
            if count is None:
                out.append(f"{SPECULATIVE}: the engine reported no draft counts")
            elif count == 0:
                out.append(f"{SPECULATIVE} never engaged: nothing drafted")
        elif activity is None or activity.kv_bits != feature.kv_bits:
            bits = None if activity is None else activity.kv_bits
            now = "full precision" if bits is None else f"{bits} bits"
            out.append(
                f"{KV_QUANTIZATION} never engaged: the cache stayed at {now} ({feature.detail})"
            )
    return out


def drafted_tokens(from_draft: Sequence[bool], max_tokens: int, num_draft: int) -> int:
    """Draft tokens proposed by mlx-lm's ``speculative_generate_step`` for a generation whose
    tokens carry ``from_draft`` flags: each round drafts ``min(max_tokens - i, num_draft)``
    tokens, ``i`` being the tokens generated before it, and yields its accepted drafts
    (``True``) then the target's own token (``False``); so a round starts at token 0 and
    after each ``False``. A round cut short by an end-of-sequence token was drafted in full:

        drafted = sum(min(max_tokens - i, num_draft) for each round start i < len(flags))
    """
    starts = [0, *(i + 1 for i, flag in enumerate(from_draft) if not flag)]
    return sum(min(max_tokens - i, num_draft) for i in starts if i < len(from_draft))


LLAMA_KV_BITS = {"q8_0": 8, "q5_0": 5, "q5_1": 5, "q4_0": 4, "q4_1": 4, "iq4_nl": 4}
"""llama-server's quantized ``--cache-type-k/-v`` values and their bits (f16, bf16, f32:
not quantized)."""

_SERVE_FLAGS: dict[str, dict[str, FeatureName]] = {
    "vllm": {"--speculative-config": SPECULATIVE, "--kv-cache-dtype": KV_QUANTIZATION},
    "llama-server": {
        "-md": SPECULATIVE,
        "--model-draft": SPECULATIVE,
        "--spec-draft-model": SPECULATIVE,
        "--spec-type": SPECULATIVE,
        "-ctk": KV_QUANTIZATION,
        "--cache-type-k": KV_QUANTIZATION,
        "-ctv": KV_QUANTIZATION,
        "--cache-type-v": KV_QUANTIZATION,
    },
}
"""By backend kind: the serve-command flags that turn a feature on."""


def declared_features(spec: BackendSpec) -> tuple[Feature, ...]:
    """The features ``spec`` turns on: its kind's options, or its serve command's flags
    (:data:`_SERVE_FLAGS`); one per feature name."""
    from .backends.options import MlxLmOptions

    found: dict[str, Feature] = {}
    options = spec.options
    if isinstance(options, MlxLmOptions):
        if options.draft_model is not None:
            found[SPECULATIVE] = Feature(
                SPECULATIVE,
                f"draft model {options.draft_model}, {options.draft_tokens} tokens per step",
            )
        if options.kv_bits is not None:
            start = options.quantized_kv_start
            found[KV_QUANTIZATION] = Feature(
                KV_QUANTIZATION,
                f"{options.kv_bits} bits from token {5000 if start is None else start}",
                kv_bits=options.kv_bits,
            )
    for flag, value in _flag_values(spec.serve or "", _SERVE_FLAGS.get(spec.kind, {})):
        feature = _serve_feature(_SERVE_FLAGS[spec.kind][flag], flag, value)
        if feature is not None:
            found.setdefault(feature.name, feature)
    return tuple(found.values())


def _flag_values(command: str, flags: Mapping[str, object]) -> list[tuple[str, str]]:
    """``(flag, value)`` for each of ``flags`` in the command (``--f v`` or ``--f=v``)."""
    try:
        args = shlex.split(command)
    except ValueError:
        return []
    out = []
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if name in flags:
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            out.append((name, value))
    return out


def _serve_feature(name: FeatureName, flag: str, value: str) -> Feature | None:
    """The feature a serve flag turns on with ``value`` (None: this value turns none on)."""
    if name == SPECULATIVE:
        if flag == "--spec-type" and value.lower() in ("", "none"):
            return None
        detail = f"{flag} {value}"
        try:
            method = json.loads(value).get("method")
        except (ValueError, AttributeError):
            method = None
        return Feature(SPECULATIVE, f"{method} ({detail})" if method else detail)
    low = value.lower()
    bits = 8 if low.startswith("fp8") else LLAMA_KV_BITS.get(low)
    if bits is None:
        return None
    return Feature(KV_QUANTIZATION, f"{flag} {value}", kv_bits=bits, server_wide=True)
