"""Unit tests for prompt-suite loading and validation (pytest_infercheck.suites)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.suites import (
    RESERVED_IDS,
    Prompt,
    Suite,
    SuiteError,
    bundled_suite_names,
    bundled_suites_dir,
    derive_prompt_id,
    load_suite,
)


def write_jsonl(path: Path, lines: list[str | dict[str, Any]]) -> Path:
    """Write raw lines (str) or records (dict, serialised as JSON) to ``path``."""
    rendered = [line if isinstance(line, str) else json.dumps(line) for line in lines]
    path.write_text("\n".join(rendered) + "\n", encoding="utf-8")
    return path


def load_error(tmp_path: Path, name: str, content: str) -> SuiteError:
    """Write ``content`` to ``tmp_path/name``, load it and return the SuiteError raised."""
    (tmp_path / name).write_text(content, encoding="utf-8")
    with pytest.raises(SuiteError) as info:
        load_suite(name, tmp_path)
    return info.value


def sha_id(text: str) -> str:
    return "p" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


# --------------------------------------------------------------------------------------------
# JSONL


def test_load_jsonl_all_fields(tmp_path: Path) -> None:
    path = write_jsonl(
        tmp_path / "mine.jsonl",
        [
            "// a comment",
            {
                "id": "q1",
                "prompt": "What is 2 + 2?",
                "category": "arithmetic",
                "max_tokens": 64,
                "answer": "4",
                "answer_kind": "number",
                "system": "Be terse.",
            },
            "",
            "# another comment",
            {"id": "q2", "text": "Say hi."},
        ],
    )
    suite = load_suite("mine.jsonl", tmp_path)
    assert isinstance(suite, Suite)
    assert suite.name == "mine"
    assert suite.path == path
    assert len(suite.prompts) == 2
    first, second = suite.prompts
    assert first == Prompt(
        id="q1",
        text="What is 2 + 2?",
        category="arithmetic",
        max_tokens=64,
        answer="4",
        answer_kind="number",
        system="Be terse.",
        source=f"{path}:2",
    )
    assert second.id == "q2"
    assert second.text == "Say hi."
    assert second.category is None
    assert second.max_tokens is None
    assert second.answer is None
    assert second.answer_kind is None
    assert second.system is None
    assert second.source == f"{path}:5"


def test_relative_subdirectory_and_absolute_paths(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    path = write_jsonl(tmp_path / "sub" / "deep.jsonl", [{"prompt": "x"}])
    assert load_suite("sub/deep.jsonl", tmp_path).name == "deep"
    assert load_suite(str(path), Path("/nonexistent")).path == path


def test_numeric_and_boolean_answers_become_strings(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "s.jsonl",
        [
            '{"id": "a", "prompt": "int", "answer": 42, "answer_kind": "number"}',
            '{"id": "b", "prompt": "float", "answer": 0.30, "answer_kind": "number"}',
            '{"id": "c", "prompt": "neg", "answer": -1.5, "answer_kind": "number"}',
            '{"id": "d", "prompt": "bool", "answer": true, "answer_kind": "boolean"}',
        ],
    )
    answers = [p.answer for p in load_suite("s.jsonl", tmp_path).prompts]
    assert answers == ["42", "0.30", "-1.5", "true"]


def test_answer_kind_without_answer_is_allowed(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s.jsonl", [{"prompt": "Write a function.", "answer_kind": "code"}])
    (prompt,) = load_suite("s.jsonl", tmp_path).prompts
    assert prompt.answer is None
    assert prompt.answer_kind == "code"


def test_derived_ids_are_stable_and_follow_sha256_rule(tmp_path: Path) -> None:
    texts = ["What is the capital of France?", "Zähle bis drei. 🙂"]
    write_jsonl(tmp_path / "s.jsonl", [{"prompt": t} for t in texts])
    first = load_suite("s.jsonl", tmp_path)
    second = load_suite("s.jsonl", tmp_path)
    expected = [sha_id(t) for t in texts]
    assert [p.id for p in first.prompts] == expected
    assert [p.id for p in second.prompts] == expected
    assert [derive_prompt_id(t) for t in texts] == expected
    assert all(len(i) == 11 and i.startswith("p") for i in expected)


def test_bad_json_reports_line_3(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a"}\n\n{"prompt": "b",,}\n')
    assert err.line == 3
    assert err.path == tmp_path / "s.jsonl"
    assert str(err).startswith(f"{tmp_path / 's.jsonl'}:3: ")
    assert "invalid JSON" in str(err)


def test_non_object_line(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a"}\n["not", "an", "object"]\n')
    assert err.line == 2
    assert "expected a JSON object" in err.reason


def test_duplicate_json_key(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a", "prompt": "b"}\n')
    assert err.line == 1
    assert "duplicate key 'prompt'" in err.reason


def test_missing_prompt(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a"}\n{"id": "x", "category": "c"}\n')
    assert err.line == 2
    assert str(err).startswith(f"{tmp_path / 's.jsonl'}:2: ")
    assert "missing required field 'prompt'" in str(err)


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_prompt(tmp_path: Path, text: str) -> None:
    err = load_error(tmp_path, "s.jsonl", json.dumps({"prompt": text}) + "\n")
    assert err.line == 1
    assert "prompt" in err.reason


def test_both_prompt_and_text(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a", "text": "b"}\n')
    assert err.line == 1
    assert "'text'" in err.reason


def test_bad_answer_kind(tmp_path: Path) -> None:
    content = (
        '{"prompt": "a", "answer": "1", "answer_kind": "number"}\n'
        '{"prompt": "b", "answer": "1", "answer_kind": "integer"}\n'
    )
    err = load_error(tmp_path, "s.jsonl", content)
    assert err.line == 2
    assert "answer_kind" in err.reason
    assert "'integer'" in err.reason


def test_answer_without_answer_kind(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a", "answer": "1"}\n')
    assert err.line == 1
    assert "answer_kind" in err.reason


@pytest.mark.parametrize(
    ("answer", "kind"),
    [("twelve", "number"), ("maybe", "boolean"), ("{not json", "json"), ("  ", "exact")],
)
def test_answer_must_match_its_kind(tmp_path: Path, answer: str, kind: str) -> None:
    record = {"prompt": "q", "answer": answer, "answer_kind": kind}
    err = load_error(tmp_path, "s.jsonl", json.dumps(record) + "\n")
    assert err.line == 1
    assert "answer" in err.reason


def test_number_answer_may_use_thousands_separators(tmp_path: Path) -> None:
    write_jsonl(
        tmp_path / "s.jsonl", [{"prompt": "q", "answer": "1,234.5", "answer_kind": "number"}]
    )
    assert load_suite("s.jsonl", tmp_path).prompts[0].answer == "1,234.5"


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    content = (
        '{"id": "a", "prompt": "x"}\n{"id": "b", "prompt": "y"}\n\n{"id": "a", "prompt": "z"}\n'
    )
    err = load_error(tmp_path, "s.jsonl", content)
    assert err.line == 4
    assert "duplicate" in err.reason
    assert "'a'" in err.reason
    assert "lines 1 and 4" in err.reason


def test_duplicate_derived_id_names_both_lines(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "same"}\n{"prompt": "same"}\n')
    assert err.line == 2
    assert sha_id("same") in err.reason
    assert "lines 1 and 2" in err.reason


def test_explicit_id_colliding_with_derived_id(tmp_path: Path) -> None:
    content = (
        json.dumps({"prompt": "same"})
        + "\n"
        + json.dumps({"id": sha_id("same"), "prompt": "other"})
    )
    err = load_error(tmp_path, "s.jsonl", content + "\n")
    assert err.line == 2
    assert "lines 1 and 2" in err.reason


def test_unknown_key_is_named(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", '{"prompt": "a"}\n{"prompt": "b", "temperature": 0.5}\n')
    assert err.line == 2
    assert "unknown key 'temperature'" in err.reason


@pytest.mark.parametrize("bad_id", ["has space", "slash/id", "", "ünïcode"])
def test_invalid_id(tmp_path: Path, bad_id: str) -> None:
    err = load_error(tmp_path, "s.jsonl", json.dumps({"id": bad_id, "prompt": "a"}) + "\n")
    assert err.line == 1
    assert "id" in err.reason


@pytest.mark.parametrize("reserved", sorted(RESERVED_IDS))
def test_reserved_id(tmp_path: Path, reserved: str) -> None:
    err = load_error(tmp_path, "s.jsonl", json.dumps({"id": reserved, "prompt": "a"}) + "\n")
    assert err.line == 1
    assert "reserved" in err.reason


def test_reserved_ids_constant() -> None:
    assert frozenset({"aggregate", "self-check"}) == RESERVED_IDS


@pytest.mark.parametrize("value", ["0", "-5", "1.5", "true", '"64"'])
def test_max_tokens_must_be_positive_int(tmp_path: Path, value: str) -> None:
    err = load_error(tmp_path, "s.jsonl", f'{{"prompt": "a", "max_tokens": {value}}}\n')
    assert err.line == 1
    assert "'max_tokens'" in err.reason


@pytest.mark.parametrize("field", ["category", "system", "id"])
def test_string_fields_reject_other_types(tmp_path: Path, field: str) -> None:
    err = load_error(tmp_path, "s.jsonl", json.dumps({"prompt": "a", field: 3}) + "\n")
    assert err.line == 1
    assert f"'{field}'" in err.reason


def test_empty_jsonl_suite(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.jsonl", "// only a comment\n\n")
    assert err.line is None
    assert "no prompts" in err.reason
    assert str(err).startswith(f"{tmp_path / 's.jsonl'}: ")


# --------------------------------------------------------------------------------------------
# YAML


def test_load_yaml_list_with_line_numbers(tmp_path: Path) -> None:
    content = (
        "# leading comment\n"  # 1
        "- id: a\n"  # 2
        "  prompt: First prompt\n"  # 3
        "  answer: 12\n"  # 4
        "  answer_kind: number\n"  # 5
        "\n"  # 6
        "- text: |\n"  # 7
        "    Multi-line\n"  # 8
        "    prompt\n"  # 9
        "  max_tokens: 128\n"  # 10
        "  system: You are careful.\n"  # 11
    )
    path = tmp_path / "user.yaml"
    path.write_text(content, encoding="utf-8")
    suite = load_suite("user.yaml", tmp_path)
    assert suite.name == "user"
    first, second = suite.prompts
    assert (first.id, first.text, first.answer, first.answer_kind) == (
        "a",
        "First prompt",
        "12",
        "number",
    )
    assert first.source == f"{path}:2"
    assert second.text == "Multi-line\nprompt\n"
    assert second.id == sha_id("Multi-line\nprompt\n")
    assert second.max_tokens == 128
    assert second.system == "You are careful."
    assert second.source == f"{path}:7"


def test_load_yml_mapping_with_prompts_key(tmp_path: Path) -> None:
    content = "prompts:\n  - id: one\n    prompt: hello\n  - id: two\n    prompt: world\n"
    path = tmp_path / "mapped.yml"
    path.write_text(content, encoding="utf-8")
    suite = load_suite("mapped.yml", tmp_path)
    assert suite.name == "mapped"
    assert [p.id for p in suite.prompts] == ["one", "two"]
    assert [p.source for p in suite.prompts] == [f"{path}:2", f"{path}:4"]


def test_yaml_boolean_answer(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "- prompt: Is 2 even?\n  answer: yes\n  answer_kind: boolean\n", encoding="utf-8"
    )
    assert load_suite("s.yaml", tmp_path).prompts[0].answer == "true"


def test_yaml_syntax_error_line(tmp_path: Path) -> None:
    content = "- id: a\n  prompt: hi\n- id: b\n  prompt: a: b\n"
    err = load_error(tmp_path, "s.yaml", content)
    assert err.line == 4
    assert str(err).startswith(f"{tmp_path / 's.yaml'}:4: ")
    assert "invalid YAML" in err.reason


def test_yaml_unterminated_string_line(tmp_path: Path) -> None:
    content = 'prompts:\n  - prompt: "abc\n  - prompt: x\n'
    err = load_error(tmp_path, "s.yaml", content)
    assert err.line == 4
    assert "invalid YAML" in err.reason


def test_yaml_missing_prompt_line(tmp_path: Path) -> None:
    content = "prompts:\n  - prompt: ok\n\n  - id: nope\n    category: x\n"
    err = load_error(tmp_path, "s.yaml", content)
    assert err.line == 4
    assert "missing required field 'prompt'" in err.reason


def test_yaml_unknown_key_line(tmp_path: Path) -> None:
    content = "- prompt: ok\n- prompt: also ok\n  seed: 3\n"
    err = load_error(tmp_path, "s.yaml", content)
    assert err.line == 2
    assert "unknown key 'seed'" in err.reason


def test_yaml_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    content = "- id: x\n  prompt: a\n- id: y\n  prompt: b\n- id: x\n  prompt: c\n"
    err = load_error(tmp_path, "s.yaml", content)
    assert err.line == 5
    assert "lines 1 and 5" in err.reason


def test_yaml_duplicate_key_in_record(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.yaml", "- prompt: a\n  category: x\n  category: y\n")
    assert err.line == 3
    assert "duplicate key 'category'" in err.reason


def test_yaml_record_must_be_mapping(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.yaml", "- prompt: a\n- just a string\n")
    assert err.line == 2
    assert "expected a mapping" in err.reason


def test_yaml_unknown_top_level_key(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.yaml", "prompts:\n  - prompt: a\nsettings: {}\n")
    assert err.line == 3
    assert "'settings'" in err.reason


def test_yaml_top_level_scalar(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.yaml", "just text\n")
    assert err.line == 1
    assert "expected a list" in err.reason


def test_yaml_id_must_be_string(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.yaml", "- prompt: a\n- id: 7\n  prompt: b\n")
    assert err.line == 2
    assert "'id'" in err.reason


@pytest.mark.parametrize("content", ["", "# nothing\n", "[]\n", "prompts: []\n"])
def test_empty_yaml_suite(tmp_path: Path, content: str) -> None:
    err = load_error(tmp_path, "s.yaml", content)
    assert "no prompts" in err.reason


# --------------------------------------------------------------------------------------------
# Resolution


def test_missing_file_lists_bundled_names(tmp_path: Path) -> None:
    with pytest.raises(SuiteError) as info:
        load_suite("does-not-exist.jsonl", tmp_path)
    err = info.value
    assert err.path == tmp_path / "does-not-exist.jsonl"
    assert err.line is None
    for name in bundled_suite_names():
        assert name in str(err)


def test_unknown_bundled_name_lists_bundled_names(tmp_path: Path) -> None:
    with pytest.raises(SuiteError) as info:
        load_suite("reasonning", tmp_path)
    assert "not found" in str(info.value)
    assert "reasoning" in str(info.value)


def test_unsupported_suffix(tmp_path: Path) -> None:
    err = load_error(tmp_path, "s.json", '[{"prompt": "a"}]')
    assert ".json" in err.reason


def test_directory_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    with pytest.raises(SuiteError, match="not a file"):
        load_suite("dir.jsonl", tmp_path)


def test_bundled_name_resolves_independently_of_base_dir(tmp_path: Path) -> None:
    suite = load_suite("reasoning", tmp_path)
    assert suite.name == "reasoning"
    assert suite.path.parent == bundled_suites_dir()
    assert suite.prompts


def test_bundled_suites_dir_points_at_suite_files() -> None:
    directory = bundled_suites_dir()
    assert directory.is_dir()
    assert (directory / "reasoning.jsonl").is_file()
    assert bundled_suite_names() == sorted(bundled_suite_names())


def test_suite_error_attributes(tmp_path: Path) -> None:
    err = SuiteError(tmp_path / "x.jsonl", 12, "boom")
    assert err.path == tmp_path / "x.jsonl"
    assert err.line == 12
    assert err.reason == "boom"
    assert str(err) == f"{tmp_path / 'x.jsonl'}:12: boom"
    assert str(SuiteError(Path("x.yaml"), None, "boom")) == "x.yaml: boom"


# --------------------------------------------------------------------------------------------
# limited()


def test_limited(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s.jsonl", [{"id": f"q{i}", "prompt": f"prompt {i}"} for i in range(5)])
    suite = load_suite("s.jsonl", tmp_path)
    assert suite.limited(None) is suite
    assert [p.id for p in suite.limited(3).prompts] == ["q0", "q1", "q2"]
    assert [p.id for p in suite.limited(3).prompts] == [p.id for p in suite.limited(3).prompts]
    assert suite.limited(10).prompts == suite.prompts
    assert suite.limited(0).prompts == ()
    limited = suite.limited(2)
    assert (limited.name, limited.path) == (suite.name, suite.path)
    assert len(suite.prompts) == 5  # the original is untouched
    with pytest.raises(ValueError):
        suite.limited(-1)


def test_prompt_and_suite_are_frozen(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "s.jsonl", [{"prompt": "a"}])
    suite = load_suite("s.jsonl", tmp_path)
    with pytest.raises(AttributeError):
        suite.name = "other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        suite.prompts[0].text = "b"  # type: ignore[misc]


def test_line_numbers_ignore_unicode_line_separators(tmp_path: Path) -> None:
    content = '{"prompt": "a\u2028b"}\r\n{"prompt": "c"}\r\n{"prompt": }\r\n'
    err = load_error(tmp_path, "s.jsonl", content)
    assert err.line == 3
