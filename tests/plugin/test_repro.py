"""``--infercheck-repro DIR``: a bundle per failed item, which fails the same item again on its
own; passing items write none; an API key never lands in a bundle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.report.repro import safe_name

from .helpers import ADDITION, junit_properties

FAILING = "  - compare: {baseline: bf16, test: q4}\n    max_kl: 1.0e-9\n"
CHECK = "infercheck.yaml::compare(bf16-vs-q4)::addition"


def run_in(folder: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``pytest`` started in ``folder``, as a maintainer would run a bundle."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=folder,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_each_failed_item_has_a_bundle_that_fails_it_again(
    pytester: pytest.Pytester, write_matrix: Any, tiny_models: dict[str, Path]
) -> None:
    write_matrix(FAILING)
    result = pytester.runpytest_subprocess("--infercheck-repro", "repro", "--junitxml", "j.xml")
    props = junit_properties(pytester.path / "j.xml")
    failed = {p[0] for p in ADDITION}  # KL > 1e-9 on every prompt
    assert result.parseoutcomes()["failed"] == len(failed) + 1  # the aggregate fails with them
    bundles = {p.name for p in (pytester.path / "repro").iterdir()}
    assert bundles == {safe_name(f"{CHECK}::{p}") for p in [*failed, "aggregate"]}
    assert props["aggregate"]["infercheck_repro"] == f"repro/{safe_name(f'{CHECK}::aggregate')}"
    folder = pytester.path / "repro" / safe_name(f"{CHECK}::s03")
    assert props["s03"]["infercheck_repro"] == f"repro/{folder.name}"
    rows = (folder / "addition.jsonl").read_text().splitlines()
    assert [json.loads(r) for r in rows] == [
        {"id": "s03", "prompt": "7+8=", "max_tokens": 5, "answer": "15", "answer_kind": "number"}
    ]
    import yaml

    matrix = yaml.safe_load((folder / "infercheck.yaml").read_text())
    assert matrix["models"]["q4"] == {"path": str(tiny_models["q4"])}
    assert matrix["checks"] == [{"compare": {"baseline": "bf16", "test": "q4"}, "max_kl": 1e-9}]
    assert matrix["suites"] == ["addition.jsonl"]
    record = json.loads((folder / "record.json").read_text())
    assert record["name"] == "s03" and record["violations"][0].endswith("> max_kl 1e-09")
    engines = json.loads((folder / "engines.json").read_text())
    assert engines["q4@local"]["model"] == str(tiny_models["q4"])
    bug = (folder / "BUG.md").read_text()
    assert bug.startswith("# compare\\(bf16\\-vs\\-q4\\)::addition::s03: mean KL ")
    # "<s>7+8=": BOS 1, a digit d is 51 + d, "+" 46, "=" 64 (as "12+34=" is 1 52 53 46 54 55 64)
    assert "prompt_inputs.base_ids: [1, 58, 46, 59, 64]" in bug
    again = run_in(folder)
    assert "2 failed" in again.stdout, again.stdout  # s03 and the aggregate that names it
    assert f"FAILED {CHECK}::s03 - " in again.stdout


def test_passing_items_write_nothing(pytester: pytest.Pytester, write_matrix: Any) -> None:
    write_matrix("  - compare: {baseline: bf16, test: q4}\n    max_kl: 10.0\n")
    pytester.runpytest_subprocess("--infercheck-repro", "repro").assert_outcomes(passed=9)
    assert not (pytester.path / "repro").exists()


def test_a_server_items_bundle_holds_its_requests_and_never_the_key(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.http.fake_server import Reply, Script, chat_answer, fake_server

    from .helpers import suite_jsonl

    key = "sk-test-5ecret"
    pytester.makefile(".jsonl", addition=suite_jsonl(ADDITION[:2]))
    script = Script([Reply(body=chat_answer(f"99 {key}"))])  # a server echoing the key
    monkeypatch.setenv("FAKE_KEY", key)
    with fake_server(script) as url:
        pytester.makefile(
            ".yaml",
            infercheck=f"models:\n  bf16: {{path: '{tiny_models['bf16']}'}}\n"
            f"backends:\n  local: {{kind: mlx-lm}}\n"
            f"  srv: {{kind: openai, url: '{url}', api_key_env: FAKE_KEY, logprobs: false}}\n"
            "suites: [addition.jsonl]\nchecks:\n"
            "  - compare: {baseline: bf16@local, test: bf16@srv}\n    min_similarity: 1.0\n",
        )
        result = pytester.runpytest_subprocess("--infercheck-repro", "repro")
        assert result.parseoutcomes()["failed"] == 3  # both items and their aggregate
        folder = (
            pytester.path
            / "repro"
            / safe_name("infercheck.yaml::compare(bf16.local-vs-bf16.srv)::addition::s01")
        )
        again = run_in(folder, {**os.environ, "FAKE_KEY": key})
    assert "FAILED infercheck.yaml::compare(bf16.local-vs-bf16.srv)::addition::s01" in again.stdout
    assert all(r["auth"] == f"Bearer {key}" for r in script.requests)
    files = [p for p in (pytester.path / "repro").rglob("*") if p.is_file()]
    assert len(files) == 3 * 7 and not [p for p in files if key in p.read_text()]
    requests = json.loads((folder / "requests.json").read_text())
    assert [(r["method"], r["url"], r["status"]) for r in requests] == [
        ("POST", f"{url}/v1/chat/completions", 200)
    ]
    assert requests[0]["request"]["messages"] == [{"role": "user", "content": "12+34="}]
    assert requests[0]["response"]["choices"][0]["message"]["content"] == "99 <redacted>"
    bug = (folder / "BUG.md").read_text()
    assert f"curl -sS -X POST '{url}/v1/chat/completions'" in bug
    assert '-H "Authorization: Bearer $FAKE_KEY"' in bug
