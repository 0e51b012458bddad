"""What an engine returned, checked against itself: faults that fail an item whatever its
thresholds.

The engine-check kinds (determinism, stress, batch-invariance, stream- and endpoint-parity,
cache-pollution) compare outputs with each other; before that, each output is checked on its
own here, and every fault found is a :class:`~.faults.Fault` (the one fault type of every
kind, :mod:`.faults`), a violation of its own, named:

* **non-finite logprob**: a NaN or ``+inf`` chosen-token logprob, or a NaN or ``+inf`` in a
  top-k map (``non-finite logprob in run 3 at positions 2, 5 (NaN)``). A ``-inf`` logprob
  (probability 0) is legitimate. Found with :mod:`.finite`.
* **top-k logprobs not normalised**: a top-k map whose mass exceeds 1 by more than the
  rounding of a correct row allows (:func:`.finite.check_topk_rows` with
  :data:`TOPK_MASS_TOL`): those logprobs cannot belong to one distribution (logits passed as
  logprobs, a shifted row).
* **logprob does not match its token** (:func:`mismatched_positions`), the consistency rule
  of a chosen logprob with the top-k map of its step, wherever a generation carries both
  (servers: maps keyed by token id or by token text; mlx-lm in-process carries no top-k, so
  there is nothing to hold its chosen logprobs to). At position ``t``, with chosen logprob
  ``c`` and top-k map ``M`` (non-empty, every value NaN- and ``+inf``-free, ``c`` not NaN
  nor ``+inf``):

  1. ``c <= max(M) + tol``: the chosen token cannot be more probable than the top-1 token;
  2. when the chosen token's key (its id, or its text for text-keyed maps) is in ``M``:
     ``|c - M[key]| <= tol`` (equal values, ``-inf`` included, always agree).

  ``tol`` is :data:`MATCH_TOL` (1e-4): an engine reads both values from one row of its own,
  so they agree up to the precision it prints them with (identical on llama-server, f32, and
  mlx_lm.server, bf16, serving the tiny adder: no fault in 22 prompts on llama-server,
  streamed and not, nor in 5 chat completions with top-5 on mlx_lm.server). Text keys that
  cannot identify one token are not looked up (rule 1 still applies): the empty text and any
  text holding U+FFFD or starting ``bytes:`` (partial UTF-8 characters), which different
  tokens share.
* **what a server's logprobs must be** (:func:`shape_faults`), wherever a generation carries
  them, each fault named:

  - **logprob count does not match the tokens**: one chosen logprob per generated token; the
    count differs from the number of top-k maps (both given) or from the server's
    ``usage.completion_tokens`` (:attr:`Generation.completion_tokens`, where given);
  - **top-k logprobs not sorted**: a top-k list, in the order the server sent it, is not
    non-increasing (ties allowed, no tolerance: rounding keeps the order). The OpenAI
    ``top_logprobs`` are the most likely tokens, most likely first; the chosen entry of a
    greedy generation is then the first one. Measured: mlx_lm.server 0.32.2 sends its
    ``argpartition`` order, unsorted, and copies the chosen ``id/token/logprob`` from that
    list's first entry instead of the generated token (``"46"`` generated, chosen tokens
    ``5, 7, 3`` reported): this rule is what names it. Entries under text keys that cannot
    identify one token (see below) are left out of the order;
  - **logprob above 0**: a chosen or top-k logprob above :data:`ABOVE_ZERO_TOL` (1e-6): a
    probability above 1. A float32 log-softmax of a token of probability ~1 rounds to at
    most half an ulp of 1 (6e-8) above 0; a bfloat16 one computed as ``x - logsumexp`` is
    never above 0 (the rounded logsumexp is not below the largest logit).
* **empty generation**: one output generated nothing while the one it is compared with did
  (:func:`empty_fault`; two empty outputs agree). Empty means no text and no token besides
  the end-of-sequence token a generation stopped on (:func:`is_empty`, the one rule; the
  comparison kinds apply it too, through :func:`one_side_empty`).
* **degenerate output** is not a fault but a counted finding of the same reading
  (:func:`read_generation`: every generation a kind reads on its own is read there, its
  faults and its finding together): a loop or a stutter (:mod:`.degenerate`), failing its
  item only under ``fail_on_degenerate: true``.
* **non-finite latency** (stress) and **non-finite similarity** (endpoint-parity): NaN or
  ``inf`` where a number must be measured.

Unreported positions. llama-server sends no probability entry for a token that ends inside a
UTF-8 character; its adapter then gives that position a NaN chosen logprob and an empty
top-k map. That pair (NaN with an *empty* map) means "not reported", not a NaN value: such a
position is None in :func:`reported_logprobs`, compared with nothing and not a fault. A NaN
with a non-empty map, or without any top-k, is a non-finite logprob.

Pure: plain values in, frozen dataclasses out; no engine (a :class:`Generation` is read by
its attributes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ..tools import ToolCall, describe_calls
from .degenerate import Degenerate, generation_degenerate
from .faults import (
    LOGPROB_ABOVE_ZERO,
    LOGPROB_COUNT,
    LOGPROB_MISMATCH,
    NON_FINITE_LOGPROB,
    NON_FINITE_SIMILARITY,
    TOPK_NOT_NORMALISED,
    TOPK_NOT_SORTED,
    Fault,
    positions_text,
)
from .finite import (
    BFLOAT16_LOGSUMEXP_TOL,
    check_scalar,
    check_topk_rows,
    check_values,
    empty_generation,
)

if TYPE_CHECKING:
    from ..backends.base import Generation

__all__ = [
    "ABOVE_ZERO_TOL",
    "MATCH_TOL",
    "TOPK_MASS_TOL",
    "Reading",
    "content_size",
    "empty_fault",
    "generation_faults",
    "is_empty",
    "latency_fault",
    "logprob_faults",
    "mismatched_positions",
    "one_side_empty",
    "output_text",
    "read_generation",
    "reported_logprobs",
    "shape_faults",
    "similarity_fault",
    "unsorted_positions",
]

MATCH_TOL = 1e-4
"""How far a chosen logprob may be from its token's top-k entry, or above the top-1 logprob."""
TOPK_MASS_TOL = BFLOAT16_LOGSUMEXP_TOL
"""How far above 0 the logsumexp of a server's top-k map may be: a server does not say in
which precision it computed its logprobs, so the bfloat16 row tolerance of :mod:`.finite`
(0.5) applies. Measured: mlx_lm.server on the tiny adder in bf16 sends top-5 maps whose
logsumexp is up to +0.032 (float32 servers: below 0.02)."""

ABOVE_ZERO_TOL = 1e-6
"""How far above 0 a logprob may be (see the module docstring)."""


_EXAMPLES = 3  # mismatching positions whose values are quoted


def _named(fault: Fault, name: str) -> Fault:
    """``fault`` grouped under ``name`` (a non-finite top-k logprob is a ``non-finite
    logprob`` of the engine kinds, whatever the quantity its text names)."""
    return fault if fault.fault == name else replace(fault, fault=name)


# ------------------------------------------------------------------ logprobs


def _unreported(value: float, row: Mapping[Any, float] | None) -> bool:
    return math.isnan(value) and row is not None and len(row) == 0


def reported_logprobs(
    chosen: Sequence[float] | None, top: Sequence[Mapping[Any, float]] | None = None
) -> list[float | None] | None:
    """The chosen logprobs with the positions the engine did not report as None (a NaN with an
    empty top-k map, see the module docstring); None when there are no chosen logprobs."""
    if chosen is None:
        return None
    rows: Sequence[Mapping[Any, float] | None] = top if top is not None else ()
    return [
        None if _unreported(v, rows[t] if t < len(rows) else None) else float(v)
        for t, v in enumerate(chosen)
    ]


def _usable_key(key: Any, keyed_by: str) -> bool:
    if keyed_by == "id":
        return True
    text = str(key)
    return bool(text) and "\ufffd" not in text and not text.startswith("bytes:")


def _agree(a: float, b: float, tol: float) -> bool:
    return a == b or abs(a - b) <= tol


def mismatched_positions(
    chosen: Sequence[float],
    top: Sequence[Mapping[Any, float]],
    keys: Sequence[Any] | None,
    *,
    keyed_by: str = "id",
    tol: float = MATCH_TOL,
) -> list[tuple[int, float, float, str]]:
    """The positions where a chosen logprob breaks the consistency rule (module docstring):
    ``(position, chosen, the value it was held to, "top-1" or "its top-k entry")``.

    ``keys[t]`` is the chosen token at ``t`` as the maps are keyed (its id for
    ``keyed_by == "id"``, else its text); without keys only rule 1 applies. Positions without
    a map, with an empty map, a non-finite map value or a NaN / ``+inf`` chosen logprob are
    not judged here (the last two are non-finite faults).
    """
    out: list[tuple[int, float, float, str]] = []
    for t in range(min(len(chosen), len(top))):
        c, row = float(chosen[t]), top[t]
        if not row or math.isnan(c) or c == math.inf:
            continue
        values = [float(v) for v in row.values()]
        if any(math.isnan(v) or v == math.inf for v in values):
            continue
        best = max(values)
        if c > best + tol:
            out.append((t, c, best, "top-1"))
            continue
        if keys is None or t >= len(keys) or not _usable_key(keys[t], keyed_by):
            continue
        entry = row.get(keys[t])
        if entry is not None and not _agree(c, float(entry), tol):
            out.append((t, c, float(entry), "its top-k entry"))
    return out


def _mismatch_fault(where: str, found: list[tuple[int, float, float, str]]) -> Fault:
    examples = "; ".join(
        f"position {t}: chosen {c:.6g} above the top-1 {held:.6g}"
        if what == "top-1"
        else f"position {t}: chosen {c:.6g}, its top-k entry {held:.6g}"
        for t, c, held, what in found[:_EXAMPLES]
    )
    more = f"; ... ({len(found)} in all)" if len(found) > _EXAMPLES else ""
    positions = [t for t, _, _, _ in found]
    at = positions_text("position", positions)
    return Fault(
        LOGPROB_MISMATCH,
        where,
        f"{LOGPROB_MISMATCH} in {where} at {at} ({examples}{more})",
        tuple(positions),
    )


def unsorted_positions(
    top: Sequence[Mapping[Any, float]], *, keyed_by: str = "id"
) -> list[tuple[int, int, float, float]]:
    """The top-k lists that are not most likely first: ``(position, index, value, the value
    before it)`` at the first rise of each list, where ``value > before`` (ties allowed).
    Entries whose key cannot identify one token (text keys, module docstring) and NaN values
    (a non-finite fault of their own) are left out of the order."""
    out: list[tuple[int, int, float, float]] = []
    for t, row in enumerate(top):
        values = [
            float(v)
            for k, v in row.items()
            if _usable_key(k, keyed_by) and not math.isnan(float(v))
        ]
        for i in range(1, len(values)):
            if values[i] > values[i - 1]:
                out.append((t, i, values[i], values[i - 1]))
                break
    return out


def _above_zero(
    chosen: Sequence[float] | None, top: Sequence[Mapping[Any, float]] | None, tol: float
) -> list[tuple[int, float]]:
    """``(position, largest value)`` where a chosen or top-k logprob exceeds ``tol``."""
    rows: Sequence[Mapping[Any, float]] = top or ()
    n = max(len(chosen or ()), len(rows))
    out: list[tuple[int, float]] = []
    for t in range(n):
        values = [float(v) for v in rows[t].values()] if t < len(rows) else []
        if chosen is not None and t < len(chosen):
            values.append(float(chosen[t]))
        finite = [v for v in values if math.isfinite(v)]
        if finite and max(finite) > tol:
            out.append((t, max(finite)))
    return out


def _count_fault(
    where: str,
    chosen: Sequence[float] | None,
    top: Sequence[Mapping[Any, float]] | None,
    completion_tokens: int | None,
) -> Fault | None:
    """A ``logprob count does not match the tokens`` fault, or None (module docstring)."""
    if chosen is None:
        return None
    n = len(chosen)
    if top is not None and len(top) != n:
        why = f"{n} chosen logprobs, {len(top)} top-k lists"
    elif completion_tokens is not None and completion_tokens != n:
        why = f"{n} logprobs for {completion_tokens} generated tokens (usage.completion_tokens)"
    else:
        return None
    return Fault(LOGPROB_COUNT, where, f"{LOGPROB_COUNT} in {where}: {why}")


def shape_faults(
    where: str,
    chosen: Sequence[float] | None,
    top: Sequence[Mapping[Any, float]] | None,
    *,
    keyed_by: str = "id",
    completion_tokens: int | None = None,
    tol: float = ABOVE_ZERO_TOL,
) -> list[Fault]:
    """What a server's logprobs must be (module docstring): one per generated token, top-k
    lists most likely first, none above ``tol``; a fault per rule broken, its positions and
    up to three examples quoted."""
    faults: list[Fault] = []
    count = _count_fault(where, chosen, top, completion_tokens)
    if count is not None:
        faults.append(count)
    unsorted = unsorted_positions(top or (), keyed_by=keyed_by)
    if unsorted:
        positions = [t for t, _, _, _ in unsorted]
        examples = "; ".join(
            f"position {t}: entry {i} {v:.6g} after {before:.6g}"
            for t, i, v, before in unsorted[:_EXAMPLES]
        )
        more = f"; ... ({len(unsorted)} in all)" if len(unsorted) > _EXAMPLES else ""
        faults.append(
            Fault(
                TOPK_NOT_SORTED,
                where,
                f"{TOPK_NOT_SORTED} in {where} at {positions_text('position', positions)} "
                f"({examples}{more})",
                tuple(positions),
            )
        )
    above = _above_zero(chosen, top, tol)
    if above:
        positions = [t for t, _ in above]
        examples = "; ".join(f"position {t}: {v:.6g}" for t, v in above[:_EXAMPLES])
        more = f"; ... ({len(above)} in all)" if len(above) > _EXAMPLES else ""
        faults.append(
            Fault(
                LOGPROB_ABOVE_ZERO,
                where,
                f"{LOGPROB_ABOVE_ZERO} in {where} at {positions_text('position', positions)} "
                f"({examples}{more})",
                tuple(positions),
            )
        )
    return faults


def logprob_faults(
    where: str,
    chosen: Sequence[float] | None,
    top: Sequence[Mapping[Any, float]] | None = None,
    keys: Sequence[Any] | None = None,
    *,
    keyed_by: str = "id",
    tol: float = MATCH_TOL,
    completion_tokens: int | None = None,
) -> list[Fault]:
    """The faults of one output's logprobs: non-finite chosen logprobs (unreported positions
    left out), non-finite or not normalised top-k maps, chosen logprobs that do not match
    their token, and what a server's logprobs must be (:func:`shape_faults`;
    ``completion_tokens``: the server's count of generated tokens, where given). See the
    module docstring. ``where`` names the output in the texts (``run 3``: ``non-finite
    logprob in run 3 at positions 2, 5 (NaN)``)."""
    faults: list[Fault] = shape_faults(
        where, chosen, top, keyed_by=keyed_by, completion_tokens=completion_tokens
    )
    reported = reported_logprobs(chosen, top)
    if reported is not None:
        values = [0.0 if v is None else v for v in reported]
        bad = check_values("logprob", values, allow_neg_inf=True, where=where)
        if bad is not None:
            faults.append(bad)
    if top is not None:
        for row in check_topk_rows("top-k logprobs", top, tol=TOPK_MASS_TOL, where=where):
            faults.append(
                row if row.fault == TOPK_NOT_NORMALISED else _named(row, NON_FINITE_LOGPROB)
            )
        if chosen is not None:
            found = mismatched_positions(chosen, top, keys, keyed_by=keyed_by, tol=tol)
            if found:
                faults.append(_mismatch_fault(where, found))
    return faults


def generation_faults(where: str, generation: Generation, *, tol: float = MATCH_TOL) -> list[Fault]:
    """:func:`logprob_faults` of a generation: its chosen logprobs and top-k maps, the keys
    being its token ids (maps keyed by id) or its token texts (``token_texts``), counted
    against the server's ``completion_tokens``."""
    keyed_by = generation.top_keys
    keys = generation.token_ids if keyed_by == "id" else generation.token_texts
    return logprob_faults(
        where,
        generation.chosen_logprobs,
        generation.top_logprobs,
        keys,
        keyed_by=keyed_by,
        tol=tol,
        completion_tokens=generation.completion_tokens,
    )


@dataclass(frozen=True)
class Reading:
    """One generation read on its own (:func:`read_generation`)."""

    faults: list[Fault]
    """Its faults (:func:`generation_faults`): violations of their own."""
    degenerate: Degenerate | None
    """Its degenerate stretch (:func:`.degenerate.generation_degenerate`): a counted finding,
    a violation only under ``fail_on_degenerate: true``."""


def read_generation(where: str, generation: Generation, *, tol: float = MATCH_TOL) -> Reading:
    """The one reading of a generation on its own that every kind makes of every generation
    it checks: its faults and its degenerate finding, named ``where``."""
    return Reading(
        generation_faults(where, generation, tol=tol), generation_degenerate(where, generation)
    )


# ------------------------------------------------------------------ empty generations


Output = tuple[str, Sequence[int] | None, str | None]
"""An output as the empty-generation rule reads it: ``(text, token_ids, finish_reason)``."""


def output_text(text: str, calls: Sequence[ToolCall]) -> str:
    """The text the empty rule reads of an output: its text, or, when it has none, the
    readable form of the tool calls its server returned apart (``Generation.tool_calls``,
    :func:`~pytest_infercheck.tools.describe_calls`): an output of calls only is not empty."""
    return text or (describe_calls(calls) if calls else "")


def content_size(text: str, token_ids: Sequence[int] | None, finish_reason: str | None) -> int:
    """Tokens generated before the end-of-sequence token (token ids known: a generation that
    stopped, ``finish_reason == "stop"``, carries it last), else characters of the text."""
    if token_ids is None:
        return len(text)
    return len(token_ids) - (1 if finish_reason == "stop" and token_ids else 0)


def is_empty(text: str, token_ids: Sequence[int] | None, finish_reason: str | None) -> bool:
    """Whether a generation is empty: the one rule of every check (the engine kinds' faults
    and a comparison's problem alike).

    Empty means no text **and** no token besides the end-of-sequence token it stopped on
    (``finish_reason == "stop"``: its last id is that token, whatever its id). So ``("",
    [eos], "stop")``, ``("", [], ...)`` and ``("", None, ...)`` (no ids known) are empty;
    a token that decodes to nothing is still a token (``("", [9], "length")`` and ``("",
    [9, eos], "stop")`` are not empty), and any text is something (``("x", [], ...)``)."""
    return text == "" and (token_ids is None or content_size(text, token_ids, finish_reason) == 0)


def one_side_empty(a: Output, b: Output, *, a_name: str, b_name: str) -> Fault | None:
    """An ``empty generation`` fault (:func:`~.finite.empty_generation`, its ``where`` the
    empty side) when exactly one of ``a`` and ``b`` is empty
    (:func:`is_empty`; two empty outputs agree). The other's size is counted by
    :func:`content_size`, without the end-of-sequence token: in tokens when both carry token
    ids, else in characters (at least 1: a non-empty output of tokens without text)."""
    unit = "tokens" if a[1] is not None and b[1] is not None else "characters"

    def count(out: Output) -> int:
        if is_empty(*out):
            return 0
        ids = out[1] if unit == "tokens" else None
        return max(content_size(out[0], ids, out[2]), 1)

    return empty_generation(count(a), count(b), base=a_name, test=b_name, unit=unit)


def empty_fault(a: Output, b: Output, *, a_name: str, b_name: str) -> Fault | None:
    """An ``empty generation`` fault when exactly one of ``a`` and ``b`` is empty
    (:func:`one_side_empty`, the one rule of every kind)."""
    return one_side_empty(a, b, a_name=a_name, b_name=b_name)


# ------------------------------------------------------------------ measurements


def latency_fault(where: str, latencies: Sequence[float]) -> Fault | None:
    """``non-finite latency at requests 3, 7 (NaN)``: NaN or ``inf`` (either sign) among the
    requests' latencies (by request index), e.g. from a broken clock."""
    bad = check_values("latency", latencies, unit="request")
    return None if bad is None else replace(bad, where=where)


def similarity_fault(where: str, value: float) -> Fault | None:
    """``non-finite similarity of chat vs completions (NaN)`` when ``value`` is not finite."""
    bad = check_scalar(f"similarity of {where}", value)
    return None if bad is None else replace(bad, fault=NON_FINITE_SIMILARITY, where=where)
