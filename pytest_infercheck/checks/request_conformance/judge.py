"""request-conformance's judge facet (pure): each answer to a probe against what a
conforming engine answers (:mod:`.probes`), a finding per difference naming the parameter.

Findings (each a violation whose source is the parameter, or the probe's name):

- ``stop``: the text does not end where the stop string first occurs in the reference (or,
  with ``include_stop``, right after it), or ``finish_reason`` is not ``stop``;
- ``max_tokens``: not exactly ``m`` tokens, not the reference's first ``m`` (ids, else
  text), or ``finish_reason`` not ``length``;
- ``usage``: ``usage.prompt_tokens`` is not the prompt's token count (its rendered ids, or
  the engine's ``/tokenize``), or ``usage.completion_tokens`` not the tokens returned (ids,
  end-of-sequence included, else logprob entries); a count that cannot be had (no
  ``/tokenize``; neither ids nor logprobs) fails naming why, never passes; so does an
  answer without usage, streamed or not (a stream is asked ``stream_options.include_usage``);
- ``logprobs``: a token without its logprob, or with other than ``k`` top logprobs;
- ``min_tokens``: fewer tokens than asked, or the end-of-sequence token among them;
- ``ignore_eos``: not exactly ``max_tokens`` tokens, or ``finish_reason`` not ``length``;
- ``n``: another number of choices than asked (a sampled choice may be empty: EOS first).

Each finding names the parameter and both values: ``usage.prompt_tokens 11 != 12 tokens
sent (non-streamed)``, ``max_tokens 4 (streamed): 7 tokens returned != 4``. A probe that
cannot be built from the reference (an output too short, no token of two characters for
``stop-spanning``, token boundaries unknown, no end-of-sequence for ``min-tokens``) fails
too: the check does not pass on nothing.
"""

from __future__ import annotations

import math
from typing import Any

from ...backends.base import Generation
from ...verdict.gate import Violation
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import Answer, ConformanceEvidence
from .probes import STOP_PROBES, Reference
from .records import ConformanceItem, ObservedAnswer


def tokens_returned(g: Generation) -> int | None:
    """Tokens an answer returned: its ids (end-of-sequence included), else its logprob
    entries; None when it returned neither."""
    if g.token_ids is not None:
        return len(g.token_ids)
    if g.chosen_logprobs is not None:
        return len(g.chosen_logprobs)
    return None


def expected(probe: str, ref: Reference, asked: dict[str, Any], top_k: int) -> str:
    """A conforming answer, in words."""
    if probe in STOP_PROBES:
        stop = asked["stop"][0]
        end = ref.text.find(stop) + (len(stop) if asked.get("include_stop") else 0)
        return f"text {ref.text[:end]!r}, finish_reason stop"
    if probe == "max-tokens":
        m = asked["max_tokens"]
        return f"{m} tokens, text {''.join(ref.pieces[:m])!r}, finish_reason length"
    if probe == "usage":
        return "usage.prompt_tokens = the prompt's tokens, completion_tokens = tokens returned"
    if probe == "logprobs":
        return f"each token's logprob and {top_k} top logprobs"
    if probe == "min-tokens":
        return f"at least {asked['min_tokens']} tokens, no end-of-sequence among them"
    if probe == "ignore-eos":
        return f"{asked['max_tokens']} tokens, finish_reason length"
    return f"{asked['n']} choices"


def judge_answer(item: ConformanceEvidence, answer: Answer) -> list[Violation]:
    """The findings of one answer (see the module docstring)."""
    ref, asked = item.reference, item.asked
    assert ref is not None and asked is not None
    g, mode, params = answer.generation, answer.mode, asked.params
    probe = item.probe
    n = tokens_returned(g)
    if probe in STOP_PROBES:
        return _stop(ref, params, g, mode)
    if probe == "max-tokens":
        return _max_tokens(ref, params["max_tokens"], g, mode, n)
    if probe == "usage":
        return _usage(item, g, mode, n) + repeats(item, g, f"usage ({mode})", "usage")
    if probe == "logprobs":
        k = params["logprobs"]
        return _logprobs(k, g, mode, n) + repeats(item, g, f"logprobs {k} ({mode})", "logprobs")
    if probe == "min-tokens":
        least = params["min_tokens"]
        out = _min_tokens(item, least, g, mode, n)
        return out + repeats(item, g, f"min_tokens {least} ({mode})", "min_tokens", prefix=True)
    if probe == "ignore-eos":
        out = _ignore_eos(params["max_tokens"], g, mode, n)
        return out + repeats(item, g, f"ignore_eos ({mode})", "ignore_eos", prefix=True)
    choices = 1 + len(g.others)
    if choices != params["n"]:
        return [
            Violation(f"n {params['n']} ({mode}): {choices} choices != {params['n']} asked", "n")
        ]
    return []


def non_finite(what: str, g: Generation) -> list[Violation]:
    """A logprob of ``g`` that is NaN or above 0 (``+inf`` among them), the chosen token's
    or a top one's: a violation of its own (a ``-inf`` one is legitimate). A token the
    engine sent no entry for (llama-server leaves out the entries of a stop string's tokens
    and of a token ending inside a UTF-8 character: NaN with no top logprobs, the backend's
    placeholder) is not a value; the ``logprobs`` probe counts it."""
    tops = g.top_logprobs or []
    rows = [
        (i, "logprob", v)
        for i, v in enumerate(g.chosen_logprobs or [])
        if (math.isnan(v) and (i >= len(tops) or tops[i])) or v > 0
    ]
    rows += [
        (i, "top logprob", v)
        for i, top in enumerate(tops)
        for v in top.values()
        if math.isnan(v) or v > 0
    ]
    if not rows:
        return []
    i, name, v = min(rows, key=lambda r: r[0])
    kind = "non-finite" if not math.isfinite(v) else "positive"
    return [Violation(f"{kind} {name} in {what}: {v} at token {i}", "fault")]


def repeats(
    item: ConformanceEvidence, g: Generation, what: str, name: str, *, prefix: bool = False
) -> list[Violation]:
    """A greedy answer must repeat the greedy output ``R`` (its ids, end-of-sequence
    included, where both have ids; else its text) and end as it did; with ``prefix``
    (``ignore_eos``, ``min_tokens``: the end-of-sequence token held back) it must start with
    ``R``'s tokens before the end-of-sequence one, and may go on."""
    ref = item.reference
    assert ref is not None
    finish = "stop" if ref.eos else "length"
    if g.token_ids is not None and ref.ids is not None:
        want = list(ref.ids)
        if not prefix and ref.eos and item.eos_id is not None:
            want.append(item.eos_id)
        got = list(g.token_ids[: len(want)] if prefix else g.token_ids)
        if got != want:
            return [Violation(f"{what}: ids {got} != the greedy output's {want}", name)]
    elif not (g.text.startswith(ref.text) if prefix else g.text == ref.text):
        return [Violation(f"{what}: text {g.text!r} != the greedy output {ref.text!r}", name)]
    if not prefix and g.finish_reason != finish:
        return [
            Violation(
                f"{what}: finish_reason {g.finish_reason!r} != the greedy output's {finish!r}",
                name,
            )
        ]
    return []


UNCOUNTED = "the tokens returned cannot be counted (neither ids nor logprobs returned)"


def _stop(ref: Reference, params: dict[str, Any], g: Generation, mode: str) -> list[Violation]:
    stop = params["stop"][0]
    included = bool(params.get("include_stop"))
    at = ref.text.find(stop)
    want = ref.text[: at + (len(stop) if included else 0)]
    name = "include_stop" if included else "stop"
    out = []
    if g.text != want:
        why = ""
        if not included and g.text == want + stop:
            why = " (the stop string returned)"
        elif included and g.text == ref.text[:at]:
            why = " (the stop string left out)"
        elif g.text.startswith(want):
            why = " (generation went on past the stop string)"
        out.append(Violation(f"{name} {stop!r} ({mode}): text {g.text!r} != {want!r}{why}", name))
    if g.finish_reason != "stop":
        out.append(
            Violation(
                f"stop {stop!r} ({mode}): finish_reason {g.finish_reason!r} != 'stop'", "stop"
            )
        )
    return out


def _max_tokens(ref: Reference, m: int, g: Generation, mode: str, n: int | None) -> list[Violation]:
    out = []
    if n is not None and n != m:
        out.append(Violation(f"max_tokens {m} ({mode}): {n} tokens returned != {m}", "max_tokens"))
    if g.token_ids is not None and ref.ids is not None:
        if tuple(g.token_ids) != ref.ids[:m]:
            out.append(
                Violation(
                    f"max_tokens {m} ({mode}): ids {list(g.token_ids)} != the greedy output's "
                    f"first {m} {list(ref.ids[:m])}",
                    "max_tokens",
                )
            )
    elif g.text != "".join(ref.pieces[:m]):
        want = "".join(ref.pieces[:m])
        out.append(
            Violation(
                f"max_tokens {m} ({mode}): text {g.text!r} != the greedy output's first {m} "
                f"tokens {want!r}",
                "max_tokens",
            )
        )
    if g.finish_reason != "length":
        out.append(
            Violation(
                f"max_tokens {m} ({mode}): finish_reason {g.finish_reason!r} != 'length'",
                "max_tokens",
            )
        )
    return out


def _min_tokens(
    item: ConformanceEvidence, least: int, g: Generation, mode: str, n: int | None
) -> list[Violation]:
    if n is None:
        return [Violation(f"min_tokens {least} ({mode}): {UNCOUNTED}", "min_tokens")]
    out = []
    if n < least:
        out.append(
            Violation(f"min_tokens {least} ({mode}): {n} tokens returned < {least}", "min_tokens")
        )
    if g.token_ids is not None and item.eos_id is not None:
        early = [i for i, t in enumerate(g.token_ids[:least]) if t == item.eos_id]
        if early:
            out.append(
                Violation(
                    f"min_tokens {least} ({mode}): end-of-sequence ({item.eos_id}) at token "
                    f"{early[0]} < {least}",
                    "min_tokens",
                )
            )
    return out


def _ignore_eos(m: int, g: Generation, mode: str, n: int | None) -> list[Violation]:
    out = []
    if n is not None and n != m:
        out.append(
            Violation(f"ignore_eos ({mode}): {n} tokens returned != max_tokens {m}", "ignore_eos")
        )
    if g.finish_reason != "length":
        out.append(
            Violation(
                f"ignore_eos ({mode}): finish_reason {g.finish_reason!r} != 'length' "
                f"(max_tokens {m})",
                "ignore_eos",
            )
        )
    return out


def _usage(item: ConformanceEvidence, g: Generation, mode: str, n: int | None) -> list[Violation]:
    if g.completion_tokens is None and g.prompt_tokens is None:
        asked = " (stream_options.include_usage asked)" if mode == "streamed" else ""
        return [Violation(f"usage ({mode}): the answer reports no usage{asked}", "usage")]
    out = []
    if g.completion_tokens is None:
        out.append(Violation(f"usage.completion_tokens ({mode}): not reported", "usage"))
    elif n is None:
        out.append(
            Violation(
                f"usage.completion_tokens {g.completion_tokens} ({mode}): {UNCOUNTED}", "usage"
            )
        )
    elif g.completion_tokens != n:
        out.append(
            Violation(
                f"usage.completion_tokens {g.completion_tokens} != {n} tokens returned ({mode})",
                "usage",
            )
        )
    want = item.prompt_tokens
    if g.prompt_tokens is None:
        out.append(Violation(f"usage.prompt_tokens ({mode}): not reported", "usage"))
    elif want is None:
        why = item.prompt_note or "the prompt's token count is unknown"
        out.append(Violation(f"usage.prompt_tokens {g.prompt_tokens} ({mode}): {why}", "usage"))
    elif g.prompt_tokens != want:
        out.append(
            Violation(
                f"usage.prompt_tokens {g.prompt_tokens} != {want} tokens sent ({mode})", "usage"
            )
        )
    return out


def _logprobs(k: int, g: Generation, mode: str, n: int | None) -> list[Violation]:
    if g.chosen_logprobs is None or g.top_logprobs is None:
        return [Violation(f"logprobs {k} ({mode}): no logprobs returned", "logprobs")]
    sizes = [len(t) for t in g.top_logprobs]
    wrong = [(i, s) for i, s in enumerate(sizes) if s != k]
    out = []
    if wrong:
        i, size = wrong[0]
        out.append(
            Violation(
                f"logprobs {k} ({mode}): {size} top logprobs at token {i} != {k} asked "
                f"({len(wrong)} of {len(sizes)} tokens)",
                "logprobs",
            )
        )
    if n is not None and len(g.chosen_logprobs) != n:
        out.append(
            Violation(
                f"logprobs {k} ({mode}): {len(g.chosen_logprobs)} logprobs != {n} tokens returned",
                "logprobs",
            )
        )
    return out


def judge(plan: ItemPlan, evidence: ConformanceEvidence, thresholds: Any) -> Judged:
    """The item's record and findings (see the module docstring)."""
    item = evidence
    violations: list[Violation] = []
    asked = item.asked
    notes = list(item.notes)
    if item.prompt_note and item.probe == "usage":
        notes.append(item.prompt_note)
    if item.reference is not None and item.reference.boundaries == "characters":
        notes.append("token boundaries unknown (no token texts or ids): characters used")
    text = ""
    if asked is not None and asked.unbuildable is not None:
        violations.append(Violation(f"probe {item.probe}: {asked.unbuildable}", item.probe))
    elif asked is not None and item.reference is not None:
        text = expected(item.probe, item.reference, asked.params, asked.params.get("logprobs", 0))
        if item.generation is not None:
            violations += non_finite("the greedy reference", item.generation)
        for answer in item.answers:
            violations += non_finite(f"the {answer.mode} answer", answer.generation)
            violations += judge_answer(item, answer)
    record = ConformanceItem(
        prompt_id=item.prompt_id,
        probe=item.probe,
        target=item.target,
        asked={} if asked is None else dict(asked.params),
        expected=text,
        answers=[observed(a) for a in item.answers],
        findings=[v.text for v in violations],
        reference=None if item.reference is None else item.reference.text,
        notes=notes,
        not_sent=not_sent(item),
    )
    return Judged(record, violations)


def not_sent(item: ConformanceEvidence) -> str | None:
    """Why the probe was not sent (its conduct's not exercised or unsupported), else None."""
    conduct = item.conduct
    if conduct.not_exercised:
        return f"not exercised: {conduct.not_exercised[0].reason}"
    unsupported = [u for u in conduct.unsupported if u.what.startswith("probe ")]
    if unsupported:
        return f"unsupported: {unsupported[0].evidence}"
    return None


def observed(answer: Answer) -> ObservedAnswer:
    g = answer.generation
    return ObservedAnswer(
        answer.mode,
        g.text,
        g.finish_reason,
        tokens_returned(g),
        g.completion_tokens,
        g.prompt_tokens,
        1 + len(g.others),
    )
