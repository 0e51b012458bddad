"""examples/engine-state run exactly as its README says (``bash
scripts/engine_state_example.sh -rA`` from the repository root): the bundled multi-turn
suite's first 4 conversations through cache-parity on llama-server and on vLLM, each
started by its ``serve:`` command, every item passing (an extra vLLM: its own serve flags)."""

from __future__ import annotations

import re
import subprocess

import pytest

from conftest import REPO


@pytest.mark.xdist_group("vllm")
def test_engine_state_example_passes_every_cache_parity_item() -> None:
    command = ["bash", "scripts/engine_state_example.sh", "-rA", "-p", "no:cacheprovider"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=3600)
    out = done.stdout
    assert done.returncode == 0, out[-6000:] + done.stderr[-3000:]
    passed = re.findall(
        r"^PASSED infercheck\.yaml::(cache-parity\S*)::multi-turn::(\w+)", out, re.M
    )
    # 2 checks x (mt001..mt004 + the aggregate): 10 items, each passed.
    assert len(passed) == 10, out[-6000:]
    assert sorted(i for _, i in passed) == sorted(
        2 * ["mt001", "mt002", "mt003", "mt004", "aggregate"]
    )
    assert len({check for check, _ in passed}) == 2
    assert "FAILED" not in out
