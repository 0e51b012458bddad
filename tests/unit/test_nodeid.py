"""The typed node id (``pytest_infercheck/nodeid.py``): every infercheck node id read in one
place, and the modules that used to split the string on ``::`` (xdist scopes, sharding,
results order, the summary tables, repro bundles, the matrices of a results file) reading it
through :class:`NodeId`.

Before, each split on ``::`` by position, so a check label holding ``::`` (a model named
``m::1``: model names are free YAML keys) or parameters holding ``::`` were cut in the wrong
place: xdist put every suite of such a check in one scope, the summary named the check
``1-vs-q4)``, and results sorted such an item away from its aggregate."""

from __future__ import annotations

import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_infercheck.nodeid import NodeId, file_of, in_file, suite_id_of
from pytest_infercheck.render.table import check_table
from pytest_infercheck.report.repro import safe_name
from pytest_infercheck.report.results import item_sort_key
from pytest_infercheck.sharding import shard_of
from pytest_infercheck.xdist_scheduling import scope_of

ODD = "m.yaml::compare(m::1-vs-q4)::addition::e11"
"""A check whose label holds ``::``: the model is named ``m::1``."""


@pytest.mark.parametrize(
    ("nodeid", "parts"),
    [
        (
            "infercheck.yaml::compare(bf16-vs-q4)::reasoning::r017",
            ("infercheck.yaml", "compare(bf16-vs-q4)", "reasoning", "r017", None),
        ),
        (
            "sub/dir/infercheck-x.yml::structured-parity(tiny)::tool-use::tu001[llama]",
            ("sub/dir/infercheck-x.yml", "structured-parity(tiny)", "tool-use", "tu001", "llama"),
        ),
        (
            "a.yaml::stress(q4.llama)::addition::c8",
            ("a.yaml", "stress(q4.llama)", "addition", "c8", None),
        ),
        (ODD, ("m.yaml", "compare(m::1-vs-q4)", "addition", "e11", None)),
        ("a.yaml::c(x)::s::i[p::q[1]]", ("a.yaml", "c(x)", "s", "i", "p::q[1]")),
        ("a.yaml::c(x)::s::aggregate", ("a.yaml", "c(x)", "s", "aggregate", None)),
    ],
)
def test_an_item_node_id_reads_into_its_parts_and_back(
    nodeid: str, parts: tuple[str, str, str, str, str | None]
) -> None:
    node = NodeId.parse(nodeid)
    assert node == NodeId(*parts)
    assert str(node) == nodeid


@pytest.mark.parametrize(
    "nodeid",
    [
        "tests/test_x.py::test_a",  # a Python test
        "tests/test_x.py::TestA::test_b[1]",
        "infercheck.yaml",  # the file
        "infercheck.yaml::compare(a-vs-b)",  # a check
        "infercheck.yaml::compare(a-vs-b)::reasoning",  # a suite
        "infercheck.yaml::compare(a-vs-b)::::r017",  # no suite
    ],
)
def test_other_node_ids_are_not_items(nodeid: str) -> None:
    assert NodeId.parse(nodeid) is None
    assert suite_id_of(nodeid) == nodeid  # stands for itself


def test_the_derived_forms() -> None:
    node = NodeId.parse("sub/i.yaml::structured-parity(t)::tool-use::tu001[llama]")
    assert node is not None
    assert node.kind == "structured-parity"
    assert node.name == "tu001[llama]"
    assert node.suite_id == "sub/i.yaml::structured-parity(t)::tool-use"
    assert node.in_file == "structured-parity(t)::tool-use::tu001[llama]"
    assert node.unparametrized == "sub/i.yaml::structured-parity(t)::tool-use::tu001"
    assert file_of(str(node)) == "sub/i.yaml" and file_of("t.py::test_a") == "t.py"
    assert in_file(str(node)) == node.in_file and in_file("t.py::test_a") == "test_a"


NAME = st.text(string.ascii_letters + string.digits + "_.-+@", min_size=1, max_size=12)
LABEL = st.text(string.ascii_letters + string.digits + "_.-+@:[]", min_size=1, max_size=16)
PARAM = st.none() | st.text(string.ascii_letters + string.digits + "_.-@:[]", max_size=12)


@given(
    file=st.builds(
        lambda d, n, ext: f"{d}{n}{ext}",
        st.sampled_from(["", "a/", "a/b/"]),
        NAME,
        st.sampled_from([".yaml", ".yml"]),
    ),
    kind=st.sampled_from(["compare", "sweep", "diff", "stress", "structured-parity"]),
    label=LABEL,
    suite=NAME,
    item=NAME,
    param=PARAM,
)
def test_any_built_node_id_reads_back_to_its_parts(
    file: str, kind: str, label: str, suite: str, item: str, param: str | None
) -> None:
    """Whatever the check's label holds (``::``, brackets) and whatever the parameters hold,
    the parts read back are the parts the id was built from."""
    node = NodeId(file, f"{kind}({label})", suite, item, param)
    assert NodeId.parse(str(node)) == node
    assert suite_id_of(str(node)) == f"{file}::{kind}({label})::{suite}"


def test_xdist_keeps_a_check_x_suite_together_whatever_its_label() -> None:
    """Before: ``m.yaml::compare(m`` + ``::1-vs-q4)``: every suite of the check in one scope."""
    assert scope_of(ODD) == "m.yaml::compare(m::1-vs-q4)::addition"
    other_suite = "m.yaml::compare(m::1-vs-q4)::reasoning::r001"
    assert scope_of(other_suite) != scope_of(ODD)
    assert scope_of("m.yaml::stress(m::1)::addition::c8") == "m.yaml::stress(m::1)::addition::c8"
    assert scope_of("tests/test_x.py::test_a") == "tests/test_x.py::test_a"


def test_the_summary_table_names_the_check_and_suite_whatever_the_label() -> None:
    """Before: the row read ``1-vs-q4)`` for the check of a model named ``m::1``."""
    aggregate = ODD.rsplit("::", 1)[0] + "::aggregate"
    lines = check_table([(aggregate, True, {"target": "m::1"})], (), lambda data: [])
    assert lines[-1].split() == ["compare(m::1-vs-q4)", "addition", "m::1", "PASS"]


def test_results_order_keeps_parametrized_items_before_their_aggregate() -> None:
    """Items with ``::`` in their parameters sort with their check x suite, the aggregate
    last (before: cut inside the parameters, such an item sorted as a suite of its own)."""
    items = [
        {"nodeid": "a.yaml::c(x)::s::aggregate", "role": "aggregate"},
        {"nodeid": "a.yaml::c(x)::s::i2[p::q]", "role": "prompt"},
        {"nodeid": "a.yaml::c(x)::s::i1[p::q]", "role": "prompt"},
        {"nodeid": "a.yaml::c(x)::t::aggregate", "role": "aggregate"},
    ]
    ordered = [i["nodeid"] for i in sorted(items, key=item_sort_key)]
    assert ordered == [
        "a.yaml::c(x)::s::i1[p::q]",
        "a.yaml::c(x)::s::i2[p::q]",
        "a.yaml::c(x)::s::aggregate",
        "a.yaml::c(x)::t::aggregate",
    ]


def test_a_shard_ignores_the_parameters_and_a_repro_folder_is_named_by_the_parts() -> None:
    base = "a.yaml::c(x)::s::tu001"
    assert shard_of(base + "[p::q]", 7) == shard_of(base + "[r]", 7) == shard_of(base, 7)
    assert safe_name("a.yaml::compare(m::1-vs-q4)::s::e1[x]") == "a.yaml-compare_m_1-vs-q4_-s-e1_x"
