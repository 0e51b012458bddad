"""cache-parity's judge (pure): a prompt's evidence and the thresholds to its record, the
kind's own findings and its waivers. The framework adds the failed requests, the reference
not shown cold and the gates (:mod:`.spec`).

Findings of a scenario (:func:`scenario_findings`):

- every fault of its output (and of its own reference): ``exact-repeat: empty generation:
  ...`` (source ``fault``);
- multi-turn's composed conversation: its first turn through the cache that differs from
  that turn uncached (the answer written into the conversation), never waived;
- an output that differs from the reference (``truncated output`` when its tokens are a
  strict prefix of the reference's), naming the first divergent token and its label
  (source ``outputs-differ:<scenario>``). Under ``fail_on: decisive`` a near-tie would be
  waived, but only once the output after it is judged; cache-parity judges nothing past a
  divergence (there is no teacher-forced pass of the cached state over the reference's
  continuation), so the waiver is never applied and the item says why;
- a scenario whose request failed, or that could not be compared because the reference's
  failed, is no finding here: the failed request itself fails the item
  (:class:`~pytest_infercheck.verdict.conduct.RequestFailure`).

The reference's own faults fail too (``reference: ...``). ``logprob_tolerance`` left at its
default judges the measured difference here (written in the entry, the framework's gate
does, and fails an item without logprobs); an item without logprobs says its logprobs were
not compared.
"""

from __future__ import annotations

from ...metrics.consistency import read_generation
from ...metrics.degenerate import DegenerateScan
from ...metrics.ties import describe_tie
from ...verdict.gate import Violation
from ...verdict.measure import Unmeasured
from ...verdict.waiver import Waiver
from ..framework.kind import Judged
from ..framework.plan import ItemPlan
from .evidence import PromptEvidence, max_logprob_diff
from .records import CacheParityPrompt, ScenarioResult
from .spec import DEFAULT_LOGPROB_GATE, CacheParityThresholds, tolerance_written

DECISIVE = "fail_on: decisive"


def differs_source(scenario: str) -> str:
    """The source of the finding that ``scenario``'s output differs (a waiver names it)."""
    return f"outputs-differ:{scenario}"


def scenario_findings(
    result: ScenarioResult, reference_text: str, thresholds: CacheParityThresholds
) -> tuple[list[Violation], Waiver | None]:
    """One scenario's findings and the waiver ``fail_on: decisive`` would offer (see the
    module docstring)."""
    if not result.exercised:
        return [], None
    name = result.scenario
    found = [Violation(f"{name}: {f.text}", "fault") for f in result.faults]
    if result.first_turn_match is False:
        found.append(
            Violation(
                f"{name}: the first turn through the cache differs from it uncached: "
                f"{result.first_turn!r} vs {result.first_turn_cached!r}",
                f"first-turn-differs:{name}",
            )
        )
    if result.error is not None or result.match is not False:
        return found, None
    ref = result.reference if result.reference is not None else reference_text
    what = "truncated output" if result.truncated else "output differs from the reference"
    where = (
        describe_tie(result.tie, ("reference", name))
        if result.tie is not None
        else f"first at {result.divergence_unit} {result.first_divergence}"
    )
    source = differs_source(name)
    found.append(Violation(f"{name}: {what}, {where}: {ref!r} vs {result.text!r}", source))
    waiver = None
    near_tie = result.tie is not None and result.tie.divergence_label == "near-tie"
    if thresholds.fail_on == "decisive" and near_tie and result.tie is not None:
        waiver = Waiver(
            DECISIVE,
            frozenset({source}),
            judged_past=False,
            why=(
                f"{name} parts from the reference at a near-tie (token {result.tie.token}), "
                "and nothing after it was judged: cache-parity has no teacher-forced pass of "
                "the cached state over the reference's continuation"
            ),
        )
    return found, waiver


def item_findings(
    record: CacheParityPrompt, thresholds: CacheParityThresholds
) -> tuple[list[Violation], list[Waiver]]:
    """Every finding of a prompt's record: the reference's faults, then each scenario's."""
    violations = [Violation(f"reference: {f.text}", "fault") for f in record.reference_faults]
    waivers = []
    for result in record.scenarios:
        found, waiver = scenario_findings(result, record.reference_text, thresholds)
        violations += found
        if waiver is not None:
            waivers.append(waiver)
    return violations, waivers


def judge(plan: ItemPlan, evidence: PromptEvidence, thresholds: CacheParityThresholds) -> Judged:
    """The item of one prompt (see the module docstring)."""
    results = evidence.results(thresholds.tie_margin)
    reference = evidence.reference
    reading = read_generation("the reference", reference) if reference is not None else None
    notes = []
    diff = max_logprob_diff(reference, results, evidence.scenarios)
    default_violations: list[Violation] = []
    if not tolerance_written(thresholds):
        if isinstance(diff, Unmeasured):
            notes.append(f"logprobs not compared: {diff.reason}")
        else:
            found = DEFAULT_LOGPROB_GATE.judge(thresholds, {"max_logprob_diff": diff})
            default_violations = [] if found is None else [found]
    record = CacheParityPrompt(
        prompt_id=evidence.prompt_id,
        target=evidence.target,
        reference_kind=evidence.reference_kind,
        reference_text=reference.text if reference is not None else "",
        reference_token_ids=reference.token_ids if reference is not None else None,
        reference_cached_tokens=reference.cached_tokens if reference is not None else None,
        scenarios=results,
        reference_faults=reading.faults if reading is not None else [],
        reference_cold="; ".join(c.describe() for c in evidence.conduct.cold) or None,
        reference_error=evidence.reference_error,
        notes=notes,
    )
    violations, waivers = item_findings(record, thresholds)
    scans = [
        DegenerateScan.of([reading.degenerate] if reading is not None else []),
        *(r.degenerate for r in results),
    ]
    return Judged(
        record,
        [*violations, *default_violations],
        waivers,
        degenerate=DegenerateScan.merged(scans),
    )
