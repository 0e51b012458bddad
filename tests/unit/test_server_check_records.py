"""The typed records of stream-parity, endpoint-parity and cache-pollution: each survives the
trip to JSON and back, keeps its JSON keys, is registered on its kind; the parity aggregate
counts flips with the one taxonomy; views and terminal rows of a record missing a field fall
back instead of raising."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from pytest_infercheck.backends.base import Generation
from pytest_infercheck.checks.cache_pollution import (
    CACHE_POLLUTION,
    HOSTILE_KINDS,
    CachePollutionAggregate,
    CachePollutionContext,
    ChangedOutput,
    HostileRecord,
    hostile_violations,
)
from pytest_infercheck.checks.cache_pollution import summary_lines as pollution_lines
from pytest_infercheck.checks.framework.items import RecordedItem, summarize_items
from pytest_infercheck.checks.framework.plan import ItemPlan
from pytest_infercheck.checks.framework.run import item_outcome
from pytest_infercheck.checks.framework.target import TargetContext
from pytest_infercheck.checks.parity import (
    ENDPOINT_PARITY,
    STREAM_PARITY,
    EndpointCounts,
    EndpointParityAggregate,
    EndpointParityContext,
    EndpointParityThresholds,
    EndpointSide,
    ParityAggregate,
    ParityEvidence,
    ParityIncomplete,
    ParityItem,
    ParityPrompt,
    StreamParityThresholds,
    StreamSide,
    compare_generations,
    count_items,
    endpoint_counts,
    endpoint_summary_lines,
    summary_lines,
)
from pytest_infercheck.checks.registry import kind_named
from pytest_infercheck.config import check_model, load_matrix
from pytest_infercheck.metrics.consistency import Fault, similarity_fault
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.merge import merge_results
from pytest_infercheck.report.views import item_detail
from pytest_infercheck.specs import KindThresholds
from pytest_infercheck.suites import Prompt
from pytest_infercheck.yamlpos import SourceError
from tests.htmldom import parse

ENGINES: dict[str, dict[str, Any]] = {"adder@llama": {"kind": "llama-server", "name": "llama"}}


def parity_prompt(
    flip: str | None = "unchanged", match: bool = True, stream: bool = True
) -> ParityPrompt:
    reference: StreamSide | EndpointSide
    other: StreamSide | EndpointSide
    if stream:
        reference = StreamSide("46", [55, 57, 2], "stop", "non-streamed")
        other = StreamSide(
            "46" if match else "4", [55, 57, 2] if match else [55, 2], "stop", "streamed"
        )
    else:
        reference = EndpointSide("46", None, "stop", "completions", "<s>user: 12+34=")
        other = EndpointSide("46" if match else "4", None, "stop", "chat")
    return ParityPrompt(
        prompt_id="s01",
        target="adder@llama",
        reference=reference,
        other=other,
        match=match,
        first_divergence=None if match else 1,
        divergence_unit=None if match else ("token" if stream else "char"),
        similarity=1.0 if match else 2 / 3,
        answers=["46", "46" if match else "4"],
        flip=flip,
        logprob_drift=0.125 if match and stream else None,
    )


def hostile_record() -> HostileRecord:
    changed = ChangedOutput("s01", "46", "47", 1, "token")
    return HostileRecord("adder@llama", "invalid-utf8", "raw bytes: HTTP 500", True, [changed], 3)


RECORDS = [
    parity_prompt(),
    parity_prompt("correct_to_wrong", match=False),
    parity_prompt("wrong_to_wrong", match=False, stream=False),
    parity_prompt(None, stream=False),
    ParityAggregate("adder@llama", 3, 1, 1, 2, 1, 1, {"s03": "HTTP 500"}, ["s02", "s03"], ENGINES),
    EndpointParityAggregate(
        "adder@llama",
        2,
        2,
        0,
        0,
        0,
        0,
        {},
        [],
        ENGINES,
        reference="completions",
        endpoints={"chat": EndpointCounts(1, 1, 0), "messages": EndpointCounts(1, 1, 0)},
    ),
    ChangedOutput("s01", "46", "47", 1, "token"),
    hostile_record(),
    HostileRecord(
        "adder@llama", "disconnect", "HTTP 200, closed after the first event", True, [], 3
    ),
    CachePollutionAggregate("adder@llama", 5, 0, 1, 1, 3, {"invalid-utf8": "HTTP 500"}, ENGINES),
]


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: type(r).__name__)
def test_records_round_trip_through_json(record: Any) -> None:
    data = json.loads(json.dumps(plain_data(record)))
    assert load_record(type(record), data) == record


def test_side_labels_keep_their_json_keys() -> None:
    stream = plain_data(parity_prompt())
    assert stream["reference"] == {
        "text": "46",
        "token_ids": [55, 57, 2],
        "finish_reason": "stop",
        "mode": "non-streamed",
    }
    endpoint = plain_data(parity_prompt(stream=False))
    assert endpoint["reference"]["endpoint"] == "completions"
    assert endpoint["reference"]["prompt_text"] == "<s>user: 12+34="
    assert endpoint["other"]["prompt_text"] is None and "mode" not in endpoint["other"]
    # each side is read back as its own kind, by its label key
    loaded = load_record(ParityPrompt, endpoint)
    assert isinstance(loaded.other, EndpointSide) and loaded.other.label == "chat"
    assert isinstance(load_record(ParityPrompt, stream).other, StreamSide)
    # a stream side with a label that is not a mode is not a record
    stream["other"]["mode"] = "blocking"
    with pytest.raises(ValueError):
        load_record(ParityPrompt, stream)


def test_kinds_register_their_records() -> None:
    assert STREAM_PARITY.spec.records == {
        "prompt": ParityPrompt,
        "incomplete": ParityIncomplete,
        "aggregate": ParityAggregate,
    }
    assert ENDPOINT_PARITY.spec.records == {
        "prompt": ParityPrompt,
        "incomplete": ParityIncomplete,
        "aggregate": EndpointParityAggregate,
    }
    assert CACHE_POLLUTION.spec.records == {
        "hostile": HostileRecord,
        "aggregate": CachePollutionAggregate,
    }


def item(record: ParityPrompt, violations: list[str] | None = None) -> ParityItem:
    return ParityItem(record, tuple(violations or ()))


def test_the_aggregate_counts_flips_with_the_one_taxonomy() -> None:
    items: dict[str, ParityItem | str] = {
        "s01[chat]": item(parity_prompt("unchanged")),
        "s02[chat]": item(parity_prompt("wrong_to_wrong", match=False), ["similarity 0.67 < 1"]),
        "s03[chat]": item(parity_prompt("correct_to_wrong", match=False), ["answer flip"]),
        "s04[chat]": item(parity_prompt(None)),
        "s05[messages]": "HTTP 500 from /v1/messages",
    }
    aggregate = count_items("adder@llama", ENGINES, items)
    # wrong_to_wrong is not a flip; correct_to_wrong is
    assert aggregate.n_flips == 1
    assert (aggregate.items, aggregate.n_match, aggregate.n_mismatch) == (5, 2, 2)
    assert aggregate.failed == ["s02[chat]", "s03[chat]", "s05[messages]"]
    assert aggregate.n_failed == 3
    assert aggregate.errors == {"s05[messages]": "HTTP 500 from /v1/messages"}
    assert aggregate.n_errors == 1
    assert endpoint_counts(items) == {
        "chat": EndpointCounts(items=4, match=2, failed=2),
        "messages": EndpointCounts(items=1, match=0, failed=1),
    }
    only_wrong_to_wrong = {"s02": item(parity_prompt("wrong_to_wrong", match=False))}
    assert count_items("adder@llama", ENGINES, only_wrong_to_wrong).n_flips == 0


def detail(kind: str, role: str, data: dict[str, Any]) -> str:
    return item_detail({"kind": kind, "role": role, "data": data})


@pytest.mark.parametrize(
    ("kind", "role", "record", "field"),
    [
        ("stream-parity", "prompt", parity_prompt(), "match"),
        ("endpoint-parity", "prompt", parity_prompt(stream=False), "other"),
        ("cache-pollution", "hostile", hostile_record(), "alive"),
    ],
)
def test_views_show_the_record_and_fall_back_when_a_field_is_missing(
    kind: str, role: str, record: Any, field: str
) -> None:
    data = plain_data(record)
    root = parse(detail(kind, role, data))
    assert "detail view" not in root.text()
    assert root.all("div", "ic-side")  # the view's side-by-side texts
    del data[field]
    root = parse(detail(kind, role, data))
    assert "(ValidationError in the detail view)" in root.text()
    assert root.one("details") and not root.all("div", "ic-side")


def test_views_read_the_record_by_attribute() -> None:
    root = parse(detail("endpoint-parity", "prompt", plain_data(parity_prompt(stream=False))))
    assert [h.text() for h in root.all("h4")][:3] == ["violations", "completions", "chat"]
    root = parse(detail("cache-pollution", "hostile", plain_data(hostile_record())))
    heads = [h.text() for h in root.all("h4")][:3]
    assert heads == ["violations", "before (s01)", "after the hostile request"]
    changed = plain_data(hostile_record())
    del changed["changed"][0]["after"]  # a changed output missing a field: not a record
    assert "ValidationError" in parse(detail("cache-pollution", "hostile", changed)).text()


def cells(lines: list[str]) -> list[str]:
    """The cells of a one-row terminal table after check, suite and target."""
    _, row = lines
    return re.split(r"\s{2,}", row)[3:]


def test_terminal_rows_read_the_records_and_mark_the_unreadable() -> None:
    node = "infercheck.yaml::{}(adder)::addition::aggregate"
    stream = plain_data(RECORDS[4])
    endpoints = plain_data(RECORDS[5])
    pollution = plain_data(RECORDS[-1])
    rows = (
        (summary_lines, "stream-parity", stream),
        (endpoint_summary_lines, "endpoint-parity", endpoints),
        (pollution_lines, "cache-pollution", pollution),
    )
    shown = [cells(summary([(node.format(kind), True, data)])) for summary, kind, data in rows]
    assert shown == [
        ["streamed vs not", "1/3", "1", "1", "PASS"],
        ["chat 1/1, messages 1/1", "2/2", "0", "0", "PASS"],
        ["5", "3", "0", "1", "PASS"],
    ]
    del stream["n_flips"], endpoints["endpoints"], pollution["n_dead"]
    for summary, kind, data in rows:
        assert cells(summary([(node.format(kind), True, data)])) == ["?"] * 4 + ["PASS"]


# -- the aggregates: summaries of the items' records -------------------------------------------
def gen(text: str, ids: list[int] | None = None, logprobs: list[float] | None = None) -> Generation:
    return Generation(text=text, token_ids=ids, finish_reason="stop", chosen_logprobs=logprobs)


PROMPT = Prompt("s01", "12+34=", None, 5, "46", "number", None, "addition.jsonl:1")
FAITHFUL = gen("46", [55, 57, 2], [-0.5, -0.25, -1.0])


def streamed(prompt_id: str, other: Generation, ref: Generation = FAITHFUL) -> ParityPrompt:
    """A stream-parity record of ``ref`` (not streamed) against ``other`` (streamed), compared
    as the run compares them."""
    result = compare_generations(PROMPT, ref, other, ("non-streamed", "streamed"))
    return ParityPrompt(
        prompt_id=prompt_id,
        target="adder@llama",
        reference=StreamSide(ref.text, ref.token_ids, "stop", "non-streamed"),
        other=StreamSide(other.text, other.token_ids, "stop", "streamed"),
        match=result.match,
        first_divergence=result.first_divergence,
        divergence_unit=result.divergence_unit,
        similarity=result.similarity,
        answers=result.answers,
        flip=result.flip,
        logprob_drift=result.logprob_drift,
        faults=result.faults,
    )


def stream_violations(other: Generation, ref: Generation = FAITHFUL) -> list[str]:
    """The violations of a stream-parity item of ``ref`` (not streamed) against ``other``
    (streamed), as the framework judges its evidence under the default thresholds."""
    evidence = ParityEvidence(PROMPT, "adder@llama", ("non-streamed", "streamed"), ref, other, 0.01)
    thresholds = StreamParityThresholds()
    judged = STREAM_PARITY.judge(ItemPlan("s01", "prompt", "s01"), evidence, thresholds)
    return item_outcome(STREAM_PARITY, judged, evidence, thresholds).violations


def read_back(role: str, name: str, record: Any, violations: Any = ()) -> RecordedItem:
    """An item as the aggregate reads it: its record through plain data and back (the live
    run and a results file alike: no non-finite number survives), and its violations."""
    data = json.loads(json.dumps(plain_data(record)))
    return RecordedItem(role, name, load_record(type(record), data), violations=tuple(violations))


def aggregate_of(kind: str, items: list[RecordedItem], thresholds: Any, context: Any) -> Any:
    """The framework's aggregate of ``items`` (the kind's summary and the rules)."""
    found = kind_named(kind)
    assert found is not None
    return summarize_items(found, items, thresholds, context)


STREAM_CONTEXT = TargetContext("adder@llama", ENGINES)
BROKEN_STREAMS = {  # the streamed output -> the words of the aggregate's line about it
    "changed token": (gen("47", [55, 58, 2], [-0.5, -0.25, -1.0]), None),
    "nan logprob": (
        gen("46", [55, 57, 2], [-0.5, math.nan, -1.0]),
        "non-finite logprob in 1 of 1 items: s01 (the streamed output at position 1)",
    ),
    "empty": (
        gen("", [2], [-1.0]),
        "empty generation in 1 of 1 items: s01 (the streamed output)",
    ),
    "-inf beside a finite logprob": (
        gen("46", [55, 57, 2], [-0.5, -math.inf, -1.0]),
        "non-finite logprob drift in 1 of 1 items: s01 (streamed vs non-streamed)",
    ),
}


@pytest.mark.parametrize("fault", list(BROKEN_STREAMS))
def test_every_fault_of_a_stream_fails_the_stream_parity_aggregate_from_its_record(
    fault: str,
) -> None:
    other, line = BROKEN_STREAMS[fault]
    record = streamed("s01", other)
    live = stream_violations(other)
    assert live  # the item fails
    summary = aggregate_of(
        "stream-parity",
        [read_back("prompt", "s01", record, live)],
        StreamParityThresholds(),
        STREAM_CONTEXT,
    )
    assert summary.violations[0] == f"1 of 1 items failed: s01 ({live[0]})"
    assert summary.violations[1:] == ([] if line is None else [line])
    assert summary.record.n_failed == 1


def test_a_drift_that_is_not_finite_is_a_fault_its_record_keeps() -> None:
    record = streamed("s01", BROKEN_STREAMS["-inf beside a finite logprob"][0])
    assert record.logprob_drift == math.inf
    assert stream_violations(BROKEN_STREAMS["-inf beside a finite logprob"][0]) == [
        "non-finite logprob drift of streamed vs non-streamed (+inf)",
        "logprob_tolerance: logprob drift with identical tokens is not finite (inf): fails",
    ]
    back = read_back("prompt", "s01", record).record
    assert back.logprob_drift is None  # JSON has no inf: its fault says so
    assert [f.text for f in back.faults] == [
        "non-finite logprob drift of streamed vs non-streamed (+inf)"
    ]
    # a NaN logprob explains its NaN drift: no second fault
    nan = streamed("s01", BROKEN_STREAMS["nan logprob"][0])
    assert [f.fault for f in nan.faults] == ["non-finite logprob"]


def test_the_stream_parity_aggregate_counts_records_and_errors_in_any_order() -> None:
    drifting = gen("46", [55, 57, 2], [-0.5, -0.26, -1.0])
    strict = StreamParityThresholds()
    s03 = streamed("s03", drifting)
    items = [
        read_back("prompt", "s03", s03, stream_violations(drifting)),
        read_back("prompt", "s01", streamed("s01", FAITHFUL)),
        RecordedItem("prompt", "s02", None, "HTTP 500 after 4 attempts"),
    ]
    summary = aggregate_of("stream-parity", items, strict, STREAM_CONTEXT)
    assert summary.violations == [
        "1 of 3 items errored: s02 (HTTP 500 after 4 attempts)",
        "1 of 3 items failed: s03 (logprob drift with identical tokens 0.01 > "
        "logprob_tolerance 0.0001)",
    ]
    record = summary.record
    assert (record.items, record.n_match, record.n_mismatch, record.n_errors) == (3, 2, 0, 1)
    assert record.errors == {"s02": "HTTP 500 after 4 attempts"}
    assert summary.text == (
        "adder@llama: 2/3 identical, 0 answer flips, 1 errors; divergences none"
    )
    assert aggregate_of("stream-parity", items[::-1], strict, STREAM_CONTEXT) == summary


def endpoint_record(
    flip: str | None, similarity: float | None, faults: list[Fault]
) -> ParityPrompt:
    record = parity_prompt(flip, match=similarity == 1.0, stream=False)
    return dataclasses.replace(record, similarity=similarity, faults=faults)


def test_the_endpoint_parity_aggregate_counts_its_items_by_their_violations() -> None:
    nan = similarity_fault("chat vs completions", math.nan)
    assert nan is not None
    flip = "answer flip correct_to_wrong (fail_item_on: correct_to_wrong)"
    items = [
        read_back("prompt", "s01[chat]", endpoint_record("unchanged", 1.0, [])),
        read_back(
            "prompt",
            "s02[chat]",
            endpoint_record("correct_to_wrong", 0.5, []),
            ["similarity", flip],
        ),
        read_back("prompt", "s03[messages]", endpoint_record(None, math.nan, [nan]), [nan.text]),
        read_back(
            "prompt", "s04[messages]", endpoint_record("wrong_to_wrong", 0.9, []), ["similarity"]
        ),
    ]
    assert items[2].record.similarity is None  # NaN read back: its fault says so
    context = EndpointParityContext("adder@llama", "completions", ENGINES)
    strict = EndpointParityThresholds()
    summary = ENDPOINT_PARITY.summarize(items, strict, context)
    assert summary.violations == [
        "non-finite similarity in 1 of 4 items: s03[messages] (chat vs completions)",
    ]
    assert summary.record.reference == "completions"
    assert summary.record.endpoints == {
        "chat": EndpointCounts(items=2, match=1, failed=1),
        "messages": EndpointCounts(items=2, match=0, failed=2),
    }
    # the framework names the failed items, each by its first violation
    assert aggregate_of("endpoint-parity", items, strict, context).violations[0] == (
        "3 of 4 items failed: s02[chat] (similarity), s03[messages] (non-finite similarity "
        "of chat vs completions (NaN)), s04[messages] (similarity)"
    )


def test_endpoint_parity_refuses_a_flip_rate_gate_it_does_not_apply() -> None:
    entry = check_model(frozenset({"endpoint-parity"}))
    written = {"endpoint-parity": "adder@llama", "flips": {"max_rate": 0.1}}
    with pytest.raises(ValidationError, match=r"endpoint-parity does not use flips\.max_rate"):
        entry.model_validate(written).kind_thresholds()
    fail_on = {"endpoint-parity": "adder@llama", "flips": {"fail_item_on": "any"}}
    thresholds = entry.model_validate(fail_on).kind_thresholds()
    assert isinstance(thresholds, EndpointParityThresholds)
    assert thresholds.flips.fail_item_on == "any"


def hostile(kind: Any, **found: Any) -> HostileRecord:
    """A hostile item's record: alive, nothing changed, 3 prompts, unless ``found`` says."""
    fields: dict[str, Any] = {"alive": True, "changed": [], "prompts": 3, **found}
    return HostileRecord("adder@llama", kind, f"answer to {kind}", **fields)


def test_the_cache_pollution_aggregate_judges_each_hostile_record_again() -> None:
    changed = ChangedOutput("s01", "46", "47", 1, "token")
    nan = Fault("non-finite logprob", "the output of s02", "non-finite logprob in ... (NaN)", [0])
    items = [
        read_back("hostile", "disconnect", hostile("disconnect", failure="HTTP 500")),
        read_back("hostile", "max-tokens-0", hostile("max-tokens-0", faults=[nan])),
        read_back("hostile", "invalid-utf8", hostile("invalid-utf8", changed=[changed])),
        read_back("hostile", "special-tokens", hostile("special-tokens")),
        read_back("hostile", "context-overflow", hostile("context-overflow", alive=False)),
    ]
    context = CachePollutionContext("adder@llama", 3, ENGINES)
    summary = CACHE_POLLUTION.summarize(items, KindThresholds(), context)
    assert summary.violations == [
        "the server died after: context-overflow",
        "reference outputs changed after: invalid-utf8",
        "non-finite logprob in 1 of 5 hostile requests: max-tokens-0 (the output of s02 at "
        "position 0)",
        "reference prompts failed after: disconnect",
    ]
    record = summary.record
    assert (record.n_hostile, record.n_dead, record.n_polluted, record.n_failed) == (5, 1, 1, 4)
    assert list(record.responses) == list(HOSTILE_KINDS)  # their order, whatever the items'
    assert CACHE_POLLUTION.summarize(items[::-1], KindThresholds(), context) == summary
    errored = [*items[3:4], RecordedItem("hostile", "disconnect", None, "server gone")]
    summary = aggregate_of("cache-pollution", errored, KindThresholds(), context)
    assert summary.violations == ["1 of 2 items errored: disconnect (server gone)"]
    assert (summary.record.n_hostile, summary.record.n_failed) == (2, 1)


def test_a_failure_of_the_reference_prompts_is_in_the_record_only_when_there_is_one() -> None:
    assert "failure" not in plain_data(hostile("disconnect"))
    record = hostile("disconnect", failure="HTTP 500")
    assert plain_data(record)["failure"] == "HTTP 500"
    assert hostile_violations(record) == [
        "the reference prompts failed around the disconnect request: HTTP 500"
    ]


def shard_results(index: int, items: list[dict[str, Any]]) -> dict[str, Any]:
    """Shard ``index``/2 of a stream-parity run holding ``items`` and its deferred aggregate."""
    node = "infercheck.yaml::stream-parity(adder)::addition::"
    aggregate = plain_data(ParityAggregate("adder@llama", 1, 1, 0, 0, 0, 0, {}, [], ENGINES))
    identity = {"check": "stream-parity(adder)", "kind": "stream-parity", "suite": "addition"}
    rows = [
        *items,
        {"role": "aggregate", "name": "aggregate", "outcome": "passed", "data": aggregate},
    ]
    return {
        "schema": "pytest-infercheck-results",
        "version": 2,
        "run": {
            "run_id": "r1",
            "started": "2026-01-01T00:00:00+00:00",
            "finished": "2026-01-01T00:00:01+00:00",
            "duration_s": 1.0,
            "argv": [],
            "shard": {"index": index, "count": 2},
            "plugin_version": "0",
            "python": "3.11",
            "platform": "linux",
            "hostname": "h",
            "exitstatus": 1 if any(i["outcome"] == "failed" for i in items) else 0,
        },
        "matrices": {},
        "engines": ENGINES,
        "items": [
            {
                "nodeid": node + row["name"],
                "duration_s": 0.1,
                "worker": None,
                "longrepr": None,
                "thresholds": {"logprob_tolerance": 1e-4},
                "violations": [],
                **identity,
                **row,
                **({"gates_deferred_to": f"{index}/2"} if row["role"] == "aggregate" else {}),
            }
            for row in rows
        ],
    }


def test_an_item_whose_engine_failed_in_a_shard_fails_the_merged_aggregate() -> None:
    passed = {
        "role": "prompt",
        "name": "s01",
        "outcome": "passed",
        "data": plain_data(parity_prompt()),
    }
    raised = {
        "role": "prompt",
        "name": "s02",
        "outcome": "failed",
        "data": {},
        "longrepr": "backend error: HTTP 500 after 4 attempts",
    }
    (run,), _ = merge_results(
        [("s1.json", shard_results(1, [passed])), ("s2.json", shard_results(2, [raised]))]
    )
    (aggregate,) = [i for i in run["items"] if i["role"] == "aggregate"]
    assert aggregate["data"]["n_errors"] == 1 and aggregate["data"]["items"] == 2
    assert aggregate["outcome"] == "failed"


MATRIX_WITH = """\
models: {{adder: {{gguf: x.gguf}}}}
backends: {{llama: {{kind: llama-server, url: 'http://127.0.0.1:9'}}}}
suites: [addition]
checks:
  - {kind}: adder@llama
    flips: {flips}
"""


@pytest.mark.parametrize(
    ("kind", "flips", "words"),
    [
        ("endpoint-parity", "{max_rate: 0.1}", "endpoint-parity does not use flips.max_rate"),
        ("stress", "{fail_item_on: any}", "stress does not use flips.fail_item_on"),
    ],
)
def test_a_flip_rule_a_kind_does_not_apply_is_a_config_error_at_its_line(
    tmp_path: Path, kind: str, flips: str, words: str
) -> None:
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX_WITH.format(kind=kind, flips=flips))
    with pytest.raises(SourceError) as caught:
        load_matrix(path)
    assert caught.value.line == 6 and words in caught.value.reason
