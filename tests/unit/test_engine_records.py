"""The typed records of determinism, batch-invariance and stress: every record survives its
plain JSON form (what crosses xdist and goes into the results file) unchanged, the recorded
quickstart items read back into them key for key, a view given a record with a field missing
falls back to the plain table, and the summary's measures name fields of the records."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.checks.batch_invariance import (
    BATCH_INVARIANCE,
    AloneOutput,
    BatchInvarianceAggregate,
    BatchInvariancePrompt,
    Trial,
)
from pytest_infercheck.checks.determinism import (
    DETERMINISM,
    SCORE_INTERVAL,
    DeterminismAggregate,
    DeterminismPrompt,
)
from pytest_infercheck.checks.framework.kind import CheckKind
from pytest_infercheck.checks.stress import (
    STRESS,
    Mismatch,
    Reference,
    StressAggregate,
    StressLevel,
    level_charts,
    level_columns,
)
from pytest_infercheck.metrics.determinism import DistinctOutput
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.terminal import summary_lines
from pytest_infercheck.report.views import item_detail
from tests.htmldom import parse

SNAPSHOT = Path(__file__).parents[1] / "plugin" / "snapshots" / "quickstart" / "results.json"
ENGINES = {"q4@local": {"backend": "mlx-lm", "model": "/models/q4"}}

DISTINCT = DistinctOutput(text="46", token_ids=[55, 57, 2], count=4)
DETERMINISM_PROMPT = DeterminismPrompt(
    prompt_id="e01",
    target="q4@local",
    runs=5,
    modal_share=0.8,
    distinct=2,
    errors=0,
    error_messages=[],
    first_divergences=[None, None, 1, None, None],
    max_logprob_drift=2.5e-7,
    outputs=[DISTINCT, DistinctOutput(text="47", token_ids=None, count=1)],
)
DETERMINISM_AGGREGATE = DeterminismAggregate(
    target="q4@local",
    runs=5,
    prompts=60,
    deterministic_prompts=59,
    score=0.9967,
    score_low=0.98,
    score_high=0.999,
    interval=SCORE_INTERVAL,
    errors=1,
    max_logprob_drift=None,
    engines=ENGINES,
)
TRIAL = Trial(
    trial=0,
    position=5,
    batch=["a08*2", "e01", "a33"],
    match=False,
    first_divergence=1,
    max_logprob_diff=0.5,
    text="47",
    divergence_unit="token",
)
FAILED_TRIAL = Trial(
    trial=1,
    position=0,
    batch=["e01", "a08"],
    match=False,
    first_divergence=None,
    max_logprob_diff=None,
    text=None,
    error="BackendError: HTTP 503",
)
BATCH_PROMPT = BatchInvariancePrompt(
    prompt_id="e01",
    target="q4@local",
    seed=0,
    alone=AloneOutput(text="46", token_ids=[55, 57, 2]),
    trials=[TRIAL, FAILED_TRIAL],
    batched_by="mlx-lm BatchGenerator",
)
BATCH_AGGREGATE = BatchInvarianceAggregate(
    target="q4@local",
    prompts=60,
    invariant_prompts=59,
    rate=59 / 60,
    trials=120,
    batched_by="mlx-lm BatchGenerator",
    engines=ENGINES,
)
MISMATCH = Mismatch(prompt_id="a", first_divergence=1, unit="char", reference="46", output="4")
LEVEL = StressLevel(
    target="q4@local",
    level=4,
    requests=20,
    errors={"http_503": 2},
    error_rate=0.1,
    consistent=17,
    consistency=0.85,
    flips=1,
    flip_rate=0.05,
    latency_p50_s=0.25,
    latency_p95_s=None,
    tokens_per_s=None,
    achieved_concurrency=3.5,
    max_in_flight=4,
    mismatches=[MISMATCH],
    violations=["consistency 0.850 (17/20 outputs equal to their reference) < ..."],
    measured_by="gw1",
)
STRESS_AGGREGATE = StressAggregate(
    target="q4@local", levels=[LEVEL, dataclasses.replace(LEVEL, level=8)], engines=ENGINES
)

RECORDS: list[Any] = [
    DISTINCT,
    DETERMINISM_PROMPT,
    DETERMINISM_AGGREGATE,
    TRIAL,
    FAILED_TRIAL,
    BATCH_PROMPT,
    BATCH_AGGREGATE,
    AloneOutput(text="46", token_ids=None),
    Reference(text="46", token_ids=[55, 57, 2]),
    MISMATCH,
    LEVEL,
    STRESS_AGGREGATE,
]

# (kind, role, record, its plain form as written into the results)
ITEMS: list[tuple[CheckKind, str, Any, dict[str, Any]]] = [
    (DETERMINISM, "prompt", DETERMINISM_PROMPT, plain_data(DETERMINISM_PROMPT)),
    (DETERMINISM, "aggregate", DETERMINISM_AGGREGATE, plain_data(DETERMINISM_AGGREGATE)),
    (BATCH_INVARIANCE, "prompt", BATCH_PROMPT, plain_data(BATCH_PROMPT)),
    (BATCH_INVARIANCE, "aggregate", BATCH_AGGREGATE, plain_data(BATCH_AGGREGATE)),
    (STRESS, "level", LEVEL, plain_data(LEVEL)),
    (STRESS, "aggregate", STRESS_AGGREGATE, plain_data(STRESS_AGGREGATE)),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_plain_form_reads_back_equal(record: Any) -> None:
    text = json.dumps(plain_data(record))  # as it crosses xdist and goes into the results
    assert load_record(type(record), json.loads(text)) == record


def test_a_trials_error_is_in_the_json_only_when_its_request_failed() -> None:
    ok, failed = plain_data(BATCH_PROMPT)["trials"]
    assert "error" not in ok and failed["error"] == "BackendError: HTTP 503"
    assert load_record(BatchInvariancePrompt, plain_data(BATCH_PROMPT)) == BATCH_PROMPT
    # results version 1 had no divergence_unit on a trial
    old = {k: v for k, v in plain_data(TRIAL).items() if k not in ("divergence_unit", "error")}
    assert load_record(Trial, old) == dataclasses.replace(TRIAL, divergence_unit=None)


def test_every_role_has_a_record() -> None:
    assert DETERMINISM.spec.records == {
        "prompt": DeterminismPrompt,
        "aggregate": DeterminismAggregate,
    }
    assert BATCH_INVARIANCE.spec.records == {
        "prompt": BatchInvariancePrompt,
        "aggregate": BatchInvarianceAggregate,
    }
    assert STRESS.spec.records == {"level": StressLevel, "aggregate": StressAggregate}
    for kind, role, record, _ in ITEMS:
        assert isinstance(record, kind.spec.records[role])


# -- the recorded quickstart ---------------------------------------------------------------
# The snapshot drops the wall-clock keys and the engines (see tests/plugin/test_quickstart.py);
# they are put back as None / {} to read the records, and dropped again to compare.
DROPPED = {"latency_p50_s", "latency_p95_s", "tokens_per_s", "achieved_concurrency"}


def _undrop(data: dict[str, Any]) -> dict[str, Any]:
    out = {**data, **({"engines": {}} if "levels" in data or "prompts" in data else {})}
    if "level" in data:
        out.update(dict.fromkeys(DROPPED))
    if "levels" in data:
        out["levels"] = [_undrop(level) for level in data["levels"]]
    return out


def _drop(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _drop(v) for k, v in data.items() if k not in DROPPED | {"engines"}}
    if isinstance(data, list):
        return [_drop(v) for v in data]
    return data


def test_the_recorded_quickstart_items_read_back_key_for_key() -> None:
    kinds = {k.name: k for k in (DETERMINISM, BATCH_INVARIANCE, STRESS)}
    items = [i for i in json.loads(SNAPSHOT.read_text()) if i["kind"] in kinds]
    assert {(i["kind"], i["role"]) for i in items} == {
        (kind, role) for kind, k in kinds.items() for role in k.spec.records
    }
    for item in items:
        record_type = kinds[item["kind"]].spec.records[item["role"]]
        record: Any = load_record(record_type, _undrop(item["data"]))
        assert _drop(plain_data(record)) == item["data"], item["nodeid"]


# -- views and summaries -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kind", "role", "record", "plain"), ITEMS, ids=[f"{k.name}-{r}" for k, r, _, _ in ITEMS]
)
def test_views_render_and_fall_back_on_a_missing_field(
    kind: CheckKind, role: str, record: Any, plain: dict[str, Any]
) -> None:
    item = {"check": f"{kind.name}(q4)", "kind": kind.name, "suite": "s", "role": role}
    page = parse(item_detail({**item, "data": plain}, "failed"))
    assert "in the detail view" not in page.text()
    first = dataclasses.fields(record)[0].name
    broken = {k: v for k, v in plain.items() if k != first}
    page = parse(item_detail({**item, "data": broken}, "failed"))
    assert page.one("details")
    views = kind.present.views
    if role in views and views[role].__module__.rpartition(".")[0] == kind_package(record):
        assert "(ValidationError in the detail view)" in page.text()


def kind_package(record: Any) -> str:
    """The kind's package a record belongs to (``pytest_infercheck.checks.stress``)."""
    return type(record).__module__.rpartition(".")[0]


def test_views_read_the_records() -> None:
    item = {"kind": "determinism", "role": "prompt", "data": plain_data(DETERMINISM_PROMPT)}
    text = parse(item_detail(item)).text()
    assert "output 1: 4 of 5 runs (modal)" in text and "output 2: 1 of 5 runs" in text
    item = {"kind": "batch-invariance", "role": "prompt", "data": plain_data(BATCH_PROMPT)}
    text = parse(item_detail(item)).text()
    assert "trial 0 (batch ['a08*2', 'e01', 'a33'])" in text
    item = {"kind": "stress", "role": "level", "data": plain_data(LEVEL)}
    text = parse(item_detail(item)).text()
    assert "reference (a)" in text and "at concurrency 4" in text and "http_503" in text


def test_stress_columns_and_charts() -> None:
    data = plain_data(STRESS_AGGREGATE)
    columns = level_columns(data)
    assert [title for title, _ in columns] == ["q4@local c4", "q4@local c8"]
    assert columns[0][1] == plain_data(LEVEL)
    assert len(level_charts("stress(q4) · s", data)) == 2
    # not a record (another version's file): one plain column, no charts, no error
    assert level_columns({"target": "t", "levels": [{"level": 1}]}) == [
        ("t", {"target": "t", "levels": [{"level": 1}]})
    ]
    assert level_charts("x", {"levels": [{}]}) == []


def test_terminal_summary_from_plain_records() -> None:
    def aggregate(kind: str, data: Any) -> tuple[str, bool, dict[str, Any]]:
        node = f"m.yaml::{kind}(q4)::addition::aggregate"
        return (node, True, {"kind": kind, "data": plain_data(data)})

    lines = summary_lines(
        [
            aggregate("determinism", DETERMINISM_AGGREGATE),
            aggregate("batch-invariance", BATCH_AGGREGATE),
            aggregate("stress", STRESS_AGGREGATE),
        ]
    )
    squeezed = [" ".join(line.split()) for line in lines]
    assert "determinism(q4) addition q4@local 5 59/60 0.9967 (0.980-0.999) 1 - FAIL" in squeezed
    assert "batch-invariance(q4) addition q4@local 120 59/60 mlx-lm BatchGenerator FAIL" in (
        squeezed
    )
    assert "stress(q4) addition on q4@local: PASS" in squeezed
    assert "c8 20 2 (http_503 x2) 17/20 1 0.250 - - 3.50/4 FAIL" in squeezed
    assert max(len(line) for line in lines) < 100, "\n".join(lines)
    verdicts = {word for line in squeezed for word in line.split() if word.lower() in VERDICTS}
    assert verdicts == {"PASS", "FAIL", "verdict"}


VERDICTS = {"pass", "fail", "verdict", "ungated"}


# -- the summary table's measures ------------------------------------------------------------
def _column_record(kind: CheckKind) -> type:
    """The record whose plain form is one column of the kind's summary table: the level of a
    kind whose columns are its levels, else the aggregate."""
    records = kind.spec.records
    return records["level"] if kind.present.columns is not None else records["aggregate"]


@pytest.mark.parametrize("kind", [DETERMINISM, BATCH_INVARIANCE, STRESS], ids=lambda k: k.name)
def test_measure_keys_are_record_fields(kind: CheckKind) -> None:
    fields = {f.name for f in dataclasses.fields(_column_record(kind))}
    keys = {key for _, measure_keys, _ in kind.present.measures for key in measure_keys}
    assert keys and keys <= fields, keys - fields
    bars = kind.present.bars
    if bars is not None:
        assert {bars.value, bars.low, bars.high} <= fields
