"""request-conformance's judge facet (pure): each answer to a probe against what a
conforming engine answers (:mod:`.probes`), a finding per difference naming the parameter.

Findings (each a violation whose source is the parameter, or the probe's name):

- ``stop``: the text does not end where the stop string first occurs in the reference (or,
  with ``include_stop``, right after it), or ``finish_reason`` is not ``stop``;
- ``max_tokens``: not exactly ``m`` tokens, not the reference's first ``m`` (ids, else
  text), or ``finish_reason`` not ``length``;
- ``usage``: ``usage.prompt_tokens`` is not the prompt's token count, or
  ``usage.completion_tokens`` not the tokens returned; a non-streamed answer without usage
  fails (a stream reports it only when asked: said, not failed);
- ``logprobs``: a token without its logprob, or with other than ``k`` top logprobs;
- ``min_tokens``: fewer tokens than asked, or the end-of-sequence token among them;
- ``ignore_eos``: not exactly ``max_tokens`` tokens, or ``finish_reason`` not ``length``;
- ``n``: another number of choices than asked, or an empty choice.

A probe that cannot be built from the reference (an output too short, or one that never
reaches end-of-sequence for ``min-tokens``) fails too: the check does not pass on nothing.
"""

from __future__ import annotations

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
    out: list[Violation] = []
    n = tokens_returned(g)
    if probe in STOP_PROBES:
        stop = params["stop"][0]
        end = ref.text.find(stop) + (len(stop) if params.get("include_stop") else 0)
        want = ref.text[:end]
        what = "include_stop" if params.get("include_stop") else "stop"
        if g.text != want:
            past = " (the stop string returned)" if g.text.endswith(stop) else ""
            out.append(
                Violation(f"stop {stop!r} ({mode}): text {g.text!r}, expected {want!r}{past}", what)
            )
        if g.finish_reason != "stop":
            out.append(
                Violation(
                    f"stop {stop!r} ({mode}): finish_reason {g.finish_reason!r}, expected 'stop'",
                    "stop",
                )
            )
    elif probe == "max-tokens":
        m = params["max_tokens"]
        if n is not None and n != m:
            out.append(Violation(f"max_tokens {m} ({mode}): {n} tokens returned", "max_tokens"))
        if g.token_ids is not None and ref.ids is not None:
            if tuple(g.token_ids) != ref.ids[:m]:
                out.append(
                    Violation(
                        f"max_tokens {m} ({mode}): ids {g.token_ids}, expected the greedy "
                        f"output's first {m}: {list(ref.ids[:m])}",
                        "max_tokens",
                    )
                )
        elif g.text != "".join(ref.pieces[:m]):
            want = "".join(ref.pieces[:m])
            out.append(
                Violation(
                    f"max_tokens {m} ({mode}): text {g.text!r}, expected {want!r}", "max_tokens"
                )
            )
        if g.finish_reason != "length":
            out.append(
                Violation(
                    f"max_tokens {m} ({mode}): finish_reason {g.finish_reason!r}, expected "
                    "'length'",
                    "max_tokens",
                )
            )
    elif probe == "usage":
        out += _usage(item, g, mode, n)
    elif probe == "logprobs":
        out += _logprobs(params["logprobs"], g, mode, n)
    elif probe == "min-tokens":
        least = params["min_tokens"]
        if n is None or n < least:
            out.append(Violation(f"min_tokens {least} ({mode}): {n} tokens returned", "min_tokens"))
        if g.token_ids is not None and item.eos_id is not None:
            early = [i for i, t in enumerate(g.token_ids[:least]) if t == item.eos_id]
            if early:
                out.append(
                    Violation(
                        f"min_tokens {least} ({mode}): end-of-sequence at token {early[0]}",
                        "min_tokens",
                    )
                )
    elif probe == "ignore-eos":
        m = params["max_tokens"]
        if (n is not None and n != m) or g.finish_reason != "length":
            out.append(
                Violation(
                    f"ignore_eos ({mode}): {n} tokens, finish_reason {g.finish_reason!r}; "
                    f"expected {m} tokens (max_tokens), finish_reason 'length'",
                    "ignore_eos",
                )
            )
    else:
        choices = [g, *g.others]
        if len(choices) != params["n"]:
            out.append(Violation(f"n {params['n']} ({mode}): {len(choices)} choices", "n"))
        empty = [i for i, c in enumerate(choices) if not c.text and not c.token_ids]
        if empty:
            out.append(Violation(f"n {params['n']} ({mode}): choice {empty[0]} is empty", "n"))
    return out


def _usage(item: ConformanceEvidence, g: Generation, mode: str, n: int | None) -> list[Violation]:
    out = []
    if g.completion_tokens is None and g.prompt_tokens is None:
        if mode == "non-streamed":
            out.append(Violation(f"usage ({mode}): the answer reports no usage", "usage"))
        return out
    if g.completion_tokens is None:
        out.append(Violation(f"usage ({mode}): no completion_tokens", "usage"))
    elif n is not None and g.completion_tokens != n:
        out.append(
            Violation(
                f"usage.completion_tokens {g.completion_tokens} ({mode}), {n} tokens returned",
                "usage",
            )
        )
    want = item.prompt_tokens
    if g.prompt_tokens is None:
        out.append(Violation(f"usage ({mode}): no prompt_tokens", "usage"))
    elif want is not None and g.prompt_tokens != want:
        out.append(
            Violation(
                f"usage.prompt_tokens {g.prompt_tokens} ({mode}), the prompt has {want} tokens",
                "usage",
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
        i, s = wrong[0]
        out.append(
            Violation(
                f"logprobs {k} ({mode}): {len(wrong)} of {len(sizes)} tokens carry another "
                f"number of top logprobs (token {i}: {s})",
                "logprobs",
            )
        )
    if n is not None and len(g.chosen_logprobs) != n:
        out.append(
            Violation(
                f"logprobs {k} ({mode}): {len(g.chosen_logprobs)} logprobs for {n} tokens",
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
    if item.boundaries == "characters" and asked is not None:
        notes.append("token boundaries unknown (no token texts or ids): characters used")
    text = ""
    if asked is not None and asked.unbuildable is not None:
        violations.append(Violation(f"probe {item.probe}: {asked.unbuildable}", item.probe))
    elif asked is not None and item.reference is not None:
        text = expected(item.probe, item.reference, asked.params, asked.params.get("logprobs", 0))
        for answer in item.answers:
            violations += judge_answer(item, answer)
        if item.probe == "usage" and len(item.answers) > 1:
            streamed = item.answers[1].generation
            if streamed.completion_tokens is None and streamed.prompt_tokens is None:
                notes.append("the streamed answer reports no usage (not asked: include_usage)")
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
