"""The typed records of stream-parity, endpoint-parity and cache-pollution: each survives the
trip to JSON and back, keeps its JSON keys, is registered on its kind; the parity aggregate
counts flips with the one taxonomy; views and terminal rows of a record missing a field fall
back instead of raising."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from pytest_infercheck.checks.cache_pollution import (
    CACHE_POLLUTION,
    CachePollutionAggregate,
    ChangedOutput,
    HostileRecord,
)
from pytest_infercheck.checks.cache_pollution import summary_lines as pollution_lines
from pytest_infercheck.checks.parity import (
    ENDPOINT_PARITY,
    STREAM_PARITY,
    EndpointCounts,
    EndpointParityAggregate,
    EndpointSide,
    ParityAggregate,
    ParityItem,
    ParityPrompt,
    StreamSide,
    count_items,
    endpoint_counts,
    endpoint_summary_lines,
    summary_lines,
)
from pytest_infercheck.checks.protocol import Outcome
from pytest_infercheck.records import load_record, plain_data
from pytest_infercheck.report.views import item_detail
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
    assert STREAM_PARITY.records == {"prompt": ParityPrompt, "aggregate": ParityAggregate}
    assert ENDPOINT_PARITY.records == {
        "prompt": ParityPrompt,
        "aggregate": EndpointParityAggregate,
    }
    assert CACHE_POLLUTION.records == {
        "hostile": HostileRecord,
        "aggregate": CachePollutionAggregate,
    }


def item(record: ParityPrompt, violations: list[str] | None = None) -> ParityItem:
    return ParityItem(record, Outcome(violations or []))


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
    assert [h.text() for h in root.all("h4")][:2] == ["completions", "chat"]
    root = parse(detail("cache-pollution", "hostile", plain_data(hostile_record())))
    assert [h.text() for h in root.all("h4")][:2] == ["before (s01)", "after the hostile request"]
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
