"""``fail_on: decisive`` on the kinds that compare a target with itself (determinism,
batch-invariance, stress): a near-tie divergence is waived only once what follows it was
judged (both outputs teacher-forced on the target), on the tiny adder in float32 behind the
forking engines of :mod:`tests.tie_engines` (every later generation of a prompt parts from
the first at token 1, where both report the two tokens 0.002 nats apart).

- ``fork-honest``: the fork then continues as the engine would: every kind passes, each
  near-tie divergence judged past (2 later tokens: each side's end of sequence).
- ``fork-degenerate``: the fork then repeats its token: the teacher-forced engine puts that
  token 20.19 nats (12+34=), 12.99 (50+25=), 11.54 (7+8=) below its own choice: every kind
  fails, naming the decisive disagreement after the near-tie. Before, the near-tie waived
  the divergence without looking past it, and every one of these items passed.
- ``fork-unscored``: an honest fork on an engine that cannot score teacher-forced: nothing
  judges what follows, so no waiver, and the item says why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import REPO
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

CONFTEST = f"""\
import sys

sys.path.insert(0, {str(REPO)!r})

from tests.tie_engines import pytest_infercheck_wrap_backend  # noqa: E402, F401
"""
KINDS = {
    "det": "determinism: {{target: adder@{backend}, runs: 3}}",
    "needle": "batch-invariance: {{target: adder@{backend}, trials: 1, batch_size: 3, seed: 1}}",
    "stress": "stress: {{target: adder@{backend}, levels: [2], repeats: 1}}",
}
THEN = ("honest", "degenerate", "unscored")


def _run(pytester: pytest.Pytester, model: Path) -> dict[str, dict[str, Any]]:
    """One run: each kind on each forking engine (a wrapper of its own per check), under
    ``fail_on: decisive``, plus determinism on the honest fork under ``fail_on: any``. The
    items of the results file by ``check::name``."""
    backends, checks = [], []
    for then in THEN:
        for short, entry in KINDS.items():
            backend = f"fork-{then}-{short}"
            backends.append(f"  {backend}: {{kind: mlx-lm, dtype: float32}}\n")
            checks.append(
                f"  - {entry.format(backend=backend)}\n    name: {backend}\n    fail_on: decisive\n"
            )
    backends.append("  fork-honest-strict: {kind: mlx-lm, dtype: float32}\n")
    checks.append(
        "  - determinism: {target: adder@fork-honest-strict, runs: 3}\n"
        "    name: fork-honest-strict\n"
    )
    pytester.makefile(".ini", pytest=INI)
    pytester.makeconftest(CONFTEST)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n  adder: {{path: '{model}'}}\nbackends:\n{''.join(backends)}"
        f"suites: [addition.jsonl]\nsettings: {{num_prompts: 3}}\nchecks:\n{''.join(checks)}",
    )
    pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--infercheck-results=r.json")
    items = json.loads((pytester.path / "r.json").read_text())["items"]
    return {f"{i['check'].split('(')[1].rstrip(')')}::{i['name']}": i for i in items}


def _engine_margin(model: Path, prompt: str, ids: list[int], at: int) -> float:
    """How far ``ids[at]`` is below the engine's own choice after ``prompt + ids[:at]``,
    scored here, apart from the run (the adder in float32, one forward pass)."""
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec

    backend = MlxLmBackend("check", MlxModelSpec(str(model), dtype="float32"))
    rendered = backend.render_sync(prompt, None, False)
    assert rendered.token_ids is not None
    row = backend.score_sync(list(rendered.token_ids), ids)[at]
    return float(row.max() - row[ids[at]])


PROMPTS = {"s01": "12+34=", "s02": "50+25=", "s03": "7+8="}
DECISIVE = "after the near-tie at token 1, {side} disagrees decisively with its engine at token 2"
CANNOT = "not judged past the near-tie at token 1: backend '{backend}' (mlx-lm) cannot score"


def test_a_near_tie_is_waived_only_past_what_was_judged(
    pytester: pytest.Pytester, tiny_models: dict[str, Path]
) -> None:
    found = _run(pytester, tiny_models["bf16"])
    prompts = [f"s0{n}" for n in (1, 2, 3)]

    # The fork is real: under fail_on: any each prompt has 2 distinct outputs in 3 runs.
    for p in prompts:
        assert found[f"fork-honest-strict::{p}"]["violations"] == [
            "2 distinct outputs in 3 runs (modal share 0.6667)"
        ]

    # fork-honest: waived, each divergence judged past its near-tie (both sides' end of
    # sequence after it: 2 later tokens, each the engine's own choice).
    judged = (
        "judged past the near-tie at token 1 by teacher forcing: 2 later tokens, each within "
        "tie_margin 0.01 of its engine's own choice"
    )
    for short in KINDS:
        for name, item in found.items():
            if name.startswith(f"fork-honest-{short}::"):
                assert item["outcome"] == "passed", (name, item["violations"])
    for p in prompts:
        det = found[f"fork-honest-det::{p}"]["data"]
        assert det["distinct"] == 2 and det["outputs"][1]["after_tie"] == {
            "judged": True,
            "why": judged,
        }
        (trial,) = found[f"fork-honest-needle::{p}"]["data"]["trials"]
        assert not trial["match"] and trial["after_tie"]["why"] == judged
    level = found["fork-honest-stress::c2"]["data"]
    assert level["consistent"] == 0 and level["violations"] == []
    assert [m["after_tie"]["why"] for m in level["mismatches"]] == [judged] * 3

    # fork-degenerate: what follows the near-tie disagrees decisively with the engine; the
    # margin is the engine's own, scored here apart.
    model = tiny_models["bf16"]
    for p in prompts:
        det = found[f"fork-degenerate-det::{p}"]
        modal = det["data"]["outputs"][0]
        after = det["data"]["outputs"][1]["after_tie"]
        assert det["outcome"] == "failed" and after["decisive_at"] == 2
        assert after["margin"] == pytest.approx(
            _engine_margin(model, PROMPTS[p], modal["token_ids"], 2), abs=1e-4
        )
        assert det["violations"][0].startswith(
            "output #2 against the modal output: " + DECISIVE.format(side="the modal output")
        ), det["violations"]
        assert "fail_on: decisive not applied: output #2: after the near-tie" in det["longrepr"]
        needle = found[f"fork-degenerate-needle::{p}"]
        assert needle["outcome"] == "failed"
        assert DECISIVE.format(side="the batched output") in needle["violations"][0]
    level = found["fork-degenerate-stress::c2"]
    assert level["violations"] == [
        "consistency (0/3 outputs equal to their reference) 0 < min_consistency 1"
    ]
    assert (
        "fail_on: decisive not applied: counting the 0 of 3 near-tie outputs judged past their "
        "near-tie, consistency 0.000 is still < min_consistency 1; 3 not: "
        + DECISIVE.format(side="request 0")
    ) in level["longrepr"]
    for short in KINDS:
        assert found[f"fork-degenerate-{short}::aggregate"]["outcome"] == "failed"

    # fork-unscored: nothing judges what follows the near-tie: no waiver, and it says why.
    for p in prompts:
        det = found[f"fork-unscored-det::{p}"]
        assert det["violations"] == ["2 distinct outputs in 3 runs (modal share 0.6667)"]
        assert (
            "fail_on: decisive not applied: output #2: the modal output "
            + CANNOT.format(backend="fork-unscored-det")
        ) in det["longrepr"]
        needle = found[f"fork-unscored-needle::{p}"]
        assert needle["violations"][0].startswith("trial 0 (position ")
        assert " output differs from the prompt alone at 1: " in needle["violations"][0]
        assert (
            "fail_on: decisive not applied: the output alone "
            + CANNOT.format(backend="fork-unscored-needle")
        ) in needle["longrepr"]
    level = found["fork-unscored-stress::c2"]
    assert level["outcome"] == "failed"
    assert ("3 not: s01's reference " + CANNOT.format(backend="fork-unscored-stress")) in (
        level["longrepr"]
    )
