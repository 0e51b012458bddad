"""The generated suite ``context-ladder``: prompts at multiples of a model's original context.

``suite: context-ladder`` (in ``suites:`` or a check's) is made per check at collection from
the model of the check's baseline (else its first test side) that has a local folder with a
``config.json``: its length ``L`` is the original context,
``rope_scaling.original_max_position_embeddings`` when the config has it, else
``max_position_embeddings`` (:func:`original_context`), or the sliding window when one is in
effect and shorter (:func:`ladder_context`: Gemma 3's ladder straddles its window). For each
multiple ``m`` of :data:`MULTIPLES` (0.5, 1, 2, 4) it holds :data:`PER_BUCKET` prompts whose
chat-rendered prompt is ``round(m * L)`` tokens of the model's own tokenizer (the user text
is deterministic prose, :func:`prose`, cut to the token count that makes the rendered prompt
that long), each with the ``length`` bucket ``"<m>x"`` and, in its metadata, the tokens of
the rendered prompt and of the text. The rendering is the model's chat template through
``transformers`` (as mlx-lm renders it); without ``transformers`` the text alone is counted
(metadata ``counted: text``). Each prompt generates :data:`MAX_TOKENS` tokens, so that the
whole sequence stays near its bucket.

A check with no such model is an error at the suite's line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .suite_spec import Prompt, Suite, SuiteError

NAME = "context-ladder"
MULTIPLES: tuple[float, ...] = (0.5, 1.0, 2.0, 4.0)
PER_BUCKET = 1
MAX_TOKENS = 16

_WORDS = [
    "river",
    "stone",
    "lamp",
    "orchard",
    "window",
    "harbor",
    "meadow",
    "signal",
    "copper",
    "lantern",
    "valley",
    "thread",
    "garden",
    "engine",
    "pillar",
    "ledger",
    "canyon",
    "marble",
    "feather",
    "compass",
    "tunnel",
    "archive",
    "summit",
    "violet",
    "granite",
    "beacon",
    "anchor",
    "timber",
    "glacier",
    "willow",
]


def original_context(config: Mapping[str, Any]) -> int:
    """The original context of a Hugging Face ``config.json``: ``rope_scaling``'s (or
    ``rope_parameters``') ``original_max_position_embeddings`` when given, else
    ``max_position_embeddings``.

    Raises:
        ValueError: neither is a positive integer.
    """
    for key in ("rope_scaling", "rope_parameters"):
        scaling = config.get(key)
        if isinstance(scaling, Mapping) and scaling.get("original_max_position_embeddings"):
            value = scaling["original_max_position_embeddings"]
            break
    else:
        value = config.get("max_position_embeddings")
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"no original context length in config.json (got {value!r})")
    return value


def sliding_window(config: Mapping[str, Any]) -> int | None:
    """The sliding window a ``config.json`` puts in effect, or None: ``sliding_window`` when
    it is a positive integer, unless ``use_sliding_window`` is false (Qwen2's configs carry a
    window they do not use) or ``layer_types`` lists no ``sliding_attention`` layer."""
    window = config.get("sliding_window")
    if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
        return None
    if config.get("use_sliding_window") is False:
        return None
    types = config.get("layer_types")
    if isinstance(types, Sequence) and "sliding_attention" not in types:
        return None
    return window


def ladder_context(config: Mapping[str, Any]) -> int:
    """The ladder's ``L``: ``min(original_context(config), sliding_window(config))``, the
    original context when no window is in effect. A sliding-window model's ladder then
    puts 0.5x inside the window, 1x's prompt at it (the generated tokens cross it) and 2x
    and 4x past it, whatever context the model declares (Gemma 3 1B: window 512 of 32,768).

    Raises:
        ValueError: no original context (:func:`original_context`).
    """
    context = original_context(config)
    window = sliding_window(config)
    return context if window is None else min(context, window)


def bucket_label(multiple: float) -> str:
    """``0.5`` -> ``0.5x``, ``2.0`` -> ``2x``."""
    return f"{multiple:g}x"


def prose(seed: int, n_words: int) -> str:
    """Deterministic prose of ``n_words`` words: sentences of 8 words drawn from
    :data:`_WORDS` (word ``(x >> 16) mod 30``) by the linear congruential generator ``x <-
    (1103515245 x + 12345) mod 2^31`` started at ``seed``, each numbered (``Note 3: ...``),
    after ``Passage <seed>.`` (so that two seeds differ from the first words)."""
    x = seed % 2**31
    words: list[str] = ["Passage", f"{seed}."]
    sentence = 0
    while len(words) < n_words:
        sentence += 1
        picked = []
        for _ in range(8):
            x = (1103515245 * x + 12345) % 2**31
            picked.append(_WORDS[(x >> 16) % len(_WORDS)])
        words += ["Note", f"{sentence}:", *picked[:-1], picked[-1] + "."]
    return " ".join(words[:n_words])


def fit_text(
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    source: str,
    n_tokens: int,
) -> str:
    """The longest prefix of ``source`` (cut at a token boundary) that ``encode`` makes at
    most ``n_tokens`` tokens: the first ``n`` ids decoded, ``n`` lowered until the text
    encodes back to at most ``n_tokens``."""
    ids = encode(source)
    if len(ids) < n_tokens:
        raise ValueError(f"the source text has {len(ids)} tokens, fewer than {n_tokens}")
    n = n_tokens
    while n > 0:
        text = decode(ids[:n]).strip()
        if len(encode(text)) <= n_tokens:
            return text
        n -= 1
    return ""


def ladder_prompts(
    context: int,
    encode: Callable[[str], list[int]],
    decode: Callable[[list[int]], str],
    rendered_len: Callable[[str], int] | None,
    multiples: Sequence[float] = MULTIPLES,
    per_bucket: int = PER_BUCKET,
) -> list[Prompt]:
    """The ladder's prompts (see the module docstring): for bucket ``m`` and prompt ``k``,
    text cut from ``prose(k)`` so that ``rendered_len(text)`` (the chat-rendered prompt's
    tokens; None: ``encode(text)``'s) is ``round(m * context)``, or the nearest below it
    when a token boundary does not allow it exactly.

    Raises:
        ValueError: a bucket's length does not exceed the chat template's own tokens.
    """
    prompts: list[Prompt] = []
    count = rendered_len or (lambda text: len(encode(text)))
    overhead = count("") if rendered_len else 0
    for multiple in multiples:
        target = max(1, round(multiple * context))
        label = bucket_label(multiple)
        if target <= overhead:
            raise ValueError(
                f"the {label} prompt would be {target} tokens, but the chat template alone "
                f"renders {overhead}: the original context ({context}) is too short"
            )
        for k in range(per_bucket):
            words = prose(k + 1, 2 * target + 64)
            want = max(1, target - overhead)
            text = fit_text(encode, decode, words, want)
            for _ in range(4):  # the template's tokens can merge with the text's
                got = count(text)
                if got == target or want <= 1:
                    break
                want += target - got
                text = fit_text(encode, decode, words, max(1, want))
            tokens = count(text)
            meta = {
                "bucket": label,
                "multiple": multiple,
                "original_context": context,
                "tokens": tokens,
                "text_tokens": len(encode(text)),
                "counted": "rendered" if rendered_len else "text",
            }
            prompts.append(
                Prompt(
                    id=f"len-{label}-{k}",
                    text=text,
                    category=NAME,
                    max_tokens=MAX_TOKENS,
                    answer=None,
                    answer_kind=None,
                    system=None,
                    source=f"{NAME}:{label}:{k}",
                    bucket=label,
                    meta=meta,
                )
            )
    return prompts


def _renderer(model_dir: Path) -> Callable[[str], int] | None:
    """Tokens of the chat-rendered single user turn, by ``transformers`` (None when it is
    not installed or the folder has no chat template)."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    if not getattr(tok, "chat_template", None):
        return None

    def rendered(text: str) -> int:
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, Mapping):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return len(ids)

    return rendered


def ladder_suite(model_dir: Path) -> Suite:
    """The ``context-ladder`` suite of the model in ``model_dir`` (its ``config.json`` and
    ``tokenizer.json``).

    Raises:
        SuiteError: the folder lacks either file, or the config has no context length.
    """
    config_path = model_dir / "config.json"
    try:
        config = json.loads(config_path.read_text())
        context = ladder_context(config)
    except (OSError, ValueError) as exc:
        raise SuiteError(config_path, None, f"{NAME}: {exc}") from exc
    from tokenizers import Tokenizer

    try:
        tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    except Exception as exc:  # tokenizers raises its own Exception type
        raise SuiteError(model_dir / "tokenizer.json", None, f"{NAME}: {exc}") from exc

    def encode(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False).ids)

    def decode(ids: list[int]) -> str:
        return str(tok.decode(ids))

    try:
        prompts = ladder_prompts(context, encode, decode, _renderer(model_dir))
    except ValueError as exc:
        raise SuiteError(config_path, None, f"{NAME}: {exc}") from exc
    return Suite(NAME, config_path, tuple(prompts))


def ladder_model_dir(sources: Sequence[str | None]) -> Path | None:
    """The first of ``sources`` (the local folders of a check's models, baseline first) that
    holds a ``config.json``."""
    for source in sources:
        if source and (Path(source) / "config.json").is_file():
            return Path(source)
    return None
