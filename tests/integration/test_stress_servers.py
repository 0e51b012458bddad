"""The stress check against real servers serving the tiny adder.

- llama-server ``-np 4`` (started once by the plugin) under ``-n 2``: the levels spread over
  both workers, all hit the one server, every output equals its reference: pass.
- The faulty proxy (alters a response whenever another generation overlapped it) in front
  of a real llama-server: level 1 passes, every level above fails on consistency.
- The faulty proxy answering every request of a level with HTTP 500: the level fails with
  the server's message, whatever ``max_error_rate`` and ``min_consistency`` allow.
- vllm-mlx's simple engine without ``VLLM_MLX_SIMPLE_ENGINE_LOCK_ADMISSION=wait`` answers
  concurrent requests with HTTP 503: level 1 passes, levels above fail with the 503s counted.
- vllm-mlx ``--continuous-batching``: the sums below are stable under 8-way concurrency and
  pass. (``1+0=`` is not among them: under concurrency its answer flips in some runs, a
  real finding, measured apart, so that this test passes every time.)
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.faulty_proxy import Fault, FaultyProxy
from tests.integration.served import (
    backend,
    llama_at,
    llama_flags,
    llama_serve,
    llama_server,
    vllm_serve,
)
from tests.plugin.conftest import INI
from tests.plugin.helpers import suite_jsonl

LLAMA_FLAGS = llama_flags(slots=4, context=256)

# Controller side: every item record xdist shipped back. Worker side: the pids of the
# llama-server processes of this test (found by the marker in their environment) seen by
# each level item.
CONFTEST = """
import json, os
from pathlib import Path

def pytest_runtest_logreport(report):
    record = getattr(report, "infercheck", None)
    if report.when == "call" and record is not None and not os.environ.get("PYTEST_XDIST_WORKER"):
        with open("records.jsonl", "a") as out:
            out.write(json.dumps({"nodeid": report.nodeid, **record}) + "\\n")

def pytest_runtest_teardown(item):
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\\0", b" ").decode()
            env = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "llama-server" in cmd and "supervise" not in cmd and "MARK" in env:
            pids.append(int(entry.name))
    with open("pids.jsonl", "a") as out:
        out.write(json.dumps(pids) + "\\n")
"""


def records(path: Path) -> dict[str, dict[str, Any]]:
    lines = (path / "records.jsonl").read_text().splitlines()
    return {r["name"]: r for r in map(json.loads, lines)}


def write_project(pytester: pytest.Pytester, models: str, backend: str, check: str) -> None:
    pytester.makefile(".ini", pytest=INI)
    pytester.makefile(".jsonl", addition=suite_jsonl())
    (pytester.path / "hub").mkdir(exist_ok=True)
    pytester.makefile(
        ".yaml",
        infercheck=f"models:\n{models}\nbackends:\n{backend}\nsuites: [addition.jsonl]\n"
        f"checks:\n{check}",
    )


def test_llama_server_np4_passes_with_levels_spread_over_two_workers(
    pytester: pytest.Pytester, adder: str, llama_server_bin: Path
) -> None:
    mark = f"INFERCHECK_STRESS_{pytester.path.name}"
    write_project(
        pytester,
        f"  adder: {adder}",
        backend("llama", "llama-server", llama_serve(llama_server_bin, LLAMA_FLAGS), {mark: "1"}),
        "  - stress: {target: adder@llama, levels: [1, 2, 4, 8], repeats: 2}\n",
    )
    pytester.makeconftest(CONFTEST.replace("MARK", mark))
    result = pytester.runpytest_subprocess("-q", "-n", "2", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    recs = records(pytester.path)
    levels = [recs[f"c{n}"]["data"] for n in (1, 2, 4, 8)]
    assert {d["measured_by"] for d in levels} == {"gw0", "gw1"}
    assert all(d["consistent"] == d["requests"] == 16 for d in levels)
    assert [d["max_in_flight"] for d in levels] == [1, 2, 4, 8]
    assert all(d["tokens_per_s"] > 0 for d in levels)  # token ids from /completion
    assert recs["aggregate"]["data"]["levels"] == levels  # reused, not measured again
    seen = [json.loads(line) for line in (pytester.path / "pids.jsonl").read_text().splitlines()]
    assert len(seen) == 5 and len({pid for pids in seen for pid in pids}) == 1  # one server
    result.stdout.fnmatch_lines(
        [
            "*infercheck summary*",
            "stress(adder) addition on adder@llama: PASS",
            "*level*requests*errors*consistent*flips*in flight*verdict",
            "*c1 *16*0*16/16*0*/1*PASS",
            "*c2 *16*0*16/16*0*/2*PASS",
            "*c4 *16*0*16/16*0*/4*PASS",
            "*c8 *16*0*16/16*0*/8*PASS",
        ]
    )


@pytest.fixture
def llama_np4(llama_server_bin: Path, tiny_gguf: Path, tmp_path: Path) -> Iterator[str]:
    """A real llama-server with 4 slots, started here (the proxy needs its URL first)."""
    with llama_server(llama_server_bin, tiny_gguf, tmp_path, LLAMA_FLAGS) as url:
        yield url


def test_faulty_proxy_altering_concurrent_answers_fails_every_level_above_one(
    pytester: pytest.Pytester, adder: str, llama_np4: str
) -> None:
    # The delay keeps each request long enough at the proxy that requests the client has in
    # flight together also overlap there (without it, on 5-token answers, the proxy at
    # times saw only two of four overlap and altered none at level 2).
    fault = Fault(perturb_when_concurrent=True, delay_s=0.05)
    with FaultyProxy(llama_np4, fault) as proxy:
        write_project(
            pytester,
            f"  adder: {adder}",
            llama_at(proxy.url),
            "  - stress: {target: adder@llama, levels: [1, 2, 4], repeats: 2}\n",
        )
        pytester.makeconftest(CONFTEST.replace("MARK", "no-managed-server"))
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    outcomes = result.parseoutcomes()
    assert outcomes == {"passed": 1, "failed": 3}, result.stdout.str()
    recs = records(pytester.path)
    assert recs["c1"]["violations"] == [] and recs["c1"]["data"]["consistent"] == 16
    for name in ("c2", "c4"):
        data = recs[name]["data"]
        assert data["errors"] == {} and data["consistent"] < 16, name
        assert data["mismatches"] and data["mismatches"][0]["unit"] == "token"
    assert proxy.altered > 0 and proxy.max_in_flight >= 2
    result.stdout.fnmatch_lines(
        ["*c2*FAIL*", "*consistency (*/16 outputs equal to their reference) * < min_consistency 1*"]
    )


def test_a_level_whose_every_request_failed_fails_whatever_its_gates_allow(
    pytester: pytest.Pytester, adder: str, llama_np4: str
) -> None:
    """The proxy answers every prompt's second request (the level's: the references were the
    first) with HTTP 500. ``max_error_rate: 1.0`` and ``min_consistency: 0.0`` allow all of
    it; before, the level of nothing but errors passed. Nothing was judged: it fails with
    the server's message."""
    with FaultyProxy(llama_np4, Fault(perturb_repeat=True, error_status=500)) as proxy:
        write_project(
            pytester,
            f"  adder: {adder}",
            llama_at(proxy.url),
            "  - stress: {target: adder@llama, levels: [1], repeats: 1}\n"
            "    max_error_rate: 1.0\n    min_consistency: 0.0\n",
        )
        pytester.makeconftest(CONFTEST.replace("MARK", "no-managed-server"))
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
        assert proxy.requests == 16 and proxy.altered == 8
    assert result.parseoutcomes() == {"failed": 2}, result.stdout.str()
    recs = records(pytester.path)
    data = recs["c1"]["data"]
    assert data["errors"] == {"http_500": 8} and data["error_rate"] == 1.0
    assert recs["c1"]["violations"] == [
        "adder@llama: every request (8 of 8) at c1 failed: HTTP 500: faulty proxy: injected "
        "HTTP 500"
    ]


def _vllm_project(pytester: pytest.Pytester, model: Path, vllm: Path, flags: str) -> None:
    hub = pytester.path / "hub"
    write_project(
        pytester,
        f"  adder: {{path: '{model}'}}",
        backend(
            "vllm", "vllm-mlx", vllm_serve(vllm, flags), {"HF_HUB_CACHE": str(hub)}, chat=False
        ),
        "  - stress: {target: adder@vllm, levels: [1, 2, 4, 8], repeats: 2}\n",
    )
    pytester.makeconftest(CONFTEST.replace("MARK", "no-llama-server"))


def test_vllm_mlx_simple_engine_answers_concurrent_requests_busy(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], vllm_mlx_bin: Path
) -> None:
    _vllm_project(pytester, tiny_models["bf16"], vllm_mlx_bin, "")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    assert result.parseoutcomes() == {"passed": 1, "failed": 4}, result.stdout.str()
    recs = records(pytester.path)
    assert recs["c1"]["data"]["errors"] == {} and recs["c1"]["data"]["consistent"] == 16
    for name in ("c2", "c4", "c8"):
        data = recs[name]["data"]
        busy = data["errors"].get("http_503", 0)
        assert busy > 0 and set(data["errors"]) == {"http_503"}, name
        # errors stay in the denominators; what did get an answer is still right
        assert data["error_rate"] == busy / 16 and data["consistent"] == 16 - busy, name
    result.stdout.fnmatch_lines(["*error rate (*/16: http_503 x*) * > max_error_rate 0*"])


def test_vllm_mlx_continuous_batching_passes_on_stable_sums(
    pytester: pytest.Pytester, tiny_models: dict[str, Path], vllm_mlx_bin: Path
) -> None:
    _vllm_project(pytester, tiny_models["bf16"], vllm_mlx_bin, " --continuous-batching")
    result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=5)
    recs = records(pytester.path)
    assert recs["c8"]["data"]["max_in_flight"] == 8
    assert recs["c8"]["data"]["tokens_per_s"] > 0  # from usage.completion_tokens
