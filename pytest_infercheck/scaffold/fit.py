"""Prompts that fit the server's context: the chosen suite's first prompts are tokenized by
the server (its ``/tokenize``), and ``max_tokens`` is lowered so that the longest prompt plus
the generation fits (a request past the context is an HTTP 400 that fails its item). When
not even 16 generated tokens fit after the suite's longest prompt (a tiny model's context),
``init`` writes :data:`SHORT_PROMPTS` as ``prompts.jsonl`` beside the matrix and uses it.

room = context - longest prompt (tokens) - margin; max_tokens = min(asked, room), refused
below :data:`MIN_TOKENS`. The margin covers what the backend adds around the counted text: a
BOS (llama-server's raw prompts: 4) or a chat template (vLLM and OpenAI servers: 48).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

from ..backends.http import HttpClient, HttpError, HttpSettings
from ..suite_files import jsonl_records, resolve
from .probe import PROBE_TIMEOUT_S, Probed

MIN_TOKENS = 16
MARGINS = {"llama-server": 4, "vllm": 48, "openai": 48}
SHORT_SUITE = "prompts.jsonl"
SHORT_PROMPTS = (
    "Count from one to ten.",
    "Name three colours.",
    "Say hello in French.",
    "What is 2+2?",
    "List four animals.",
    "Spell the word cat.",
    "Name a large city.",
    "Write a short title.",
    "What day follows Monday?",
    "Give an even number.",
)
"""Short open prompts (at most 24 characters) for a context too small for a bundled suite."""


def short_suite_text() -> str:
    """:data:`SHORT_PROMPTS` as a JSON Lines suite (ids ``s01``...)."""
    return "".join(
        json.dumps({"id": f"s{i:02d}", "category": "short", "prompt": text}) + "\n"
        for i, text in enumerate(SHORT_PROMPTS, start=1)
    )


def fitted_max_tokens(lengths: Sequence[int], context: int, asked: int, margin: int) -> int | None:
    """``min(asked, context - max(lengths) - margin)``, None when that is below
    :data:`MIN_TOKENS` (see the module docstring)."""
    room = context - max(lengths, default=0) - margin
    return min(asked, room) if room >= MIN_TOKENS else None


def suite_texts(suite: str, base_dir: Path, n: int) -> list[str]:
    """The text of the first ``n`` prompts of ``suite`` (a bundled name or a file; a
    conversation's turns joined)."""
    path, _ = resolve(suite, base_dir)
    texts: list[str] = []
    if path.suffix != ".jsonl":
        return texts
    for _, record in jsonl_records(path, path.read_text()):
        text = record.get("prompt") or record.get("text")
        if not isinstance(text, str):
            turns = record.get("messages") or []
            text = "\n".join(str(t.get("content", "")) for t in turns if isinstance(t, dict))
        texts.append(text)
        if len(texts) == n:
            break
    return texts


def count_tokens(probed: Probed, texts: Sequence[str]) -> list[int] | None:
    """Each text's token count by the server's ``/tokenize`` (None: no such endpoint, or it
    failed: nothing is fitted)."""
    if probed.url is None or not probed.tokenizer or probed.kind not in MARGINS:
        return None
    return asyncio.run(_count(probed, texts))


async def _count(probed: Probed, texts: Sequence[str]) -> list[int] | None:
    assert probed.url is not None
    http = HttpClient("init", HttpSettings(probed.url, timeout_s=PROBE_TIMEOUT_S, retries=0))

    def body(text: str) -> dict[str, object]:
        if probed.kind == "llama-server":
            return {"content": text, "add_special": True}
        return {"model": probed.served, "prompt": text}

    try:
        answers = await asyncio.gather(*(http.request("POST", "/tokenize", body(t)) for t in texts))
        return [len(a["tokens"]) for a in answers]
    except (HttpError, KeyError, TypeError):
        return None
    finally:
        await http.aclose()
