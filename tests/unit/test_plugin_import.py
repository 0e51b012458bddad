"""Loading the plugin stays cheap: `pytest --help` in a project with the plugin installed
must not pay for mlx, numpy, httpx or pydantic."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path


def test_plugin_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_infercheck.plugin\n"
        "heavy = ('mlx', 'mlx_lm', 'numpy', 'httpx', 'pydantic')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


OTHER_KINDS = (
    "batch_invariance",
    "cache_pollution",
    "determinism",
    "parity",
    "stress",
    "tokenization",
)


def test_collecting_a_matrix_imports_only_the_kinds_it_uses(tmp_path: Path) -> None:
    """``pytest --collect-only`` on a ``diff`` matrix: the comparison kinds are imported,
    no other kind's module is (the registry imports a kind on first use)."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "suite.jsonl").write_text('{"id": "a", "prompt": "hi"}\n')
    (tmp_path / "infercheck.yaml").write_text(
        "models: {m: {path: /nonexistent/model, gguf: /nonexistent/m.gguf}}\n"
        "backends:\n"
        "  a: {kind: llama-server, url: 'http://127.0.0.1:9'}\n"
        "  b: {kind: vllm-mlx, url: 'http://127.0.0.1:10'}\n"
        "suites: [./suite.jsonl]\n"
        "checks: [{diff: {model: m, backends: [a, b]}}]\n"
    )
    code = (
        "import sys, pytest\n"
        "code = pytest.main(['-q', '-p', 'no:cacheprovider', '--collect-only', "
        "'infercheck.yaml'])\n"
        "pre = 'pytest_infercheck.checks.'\n"
        "kinds = {m.split('.')[2] for m in sys.modules if m.startswith(pre)}\n"
        "print(int(code), sorted(kinds))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    code_, _, kinds = out.stdout.strip().splitlines()[-1].partition(" ")
    assert code_ == "0", out.stdout
    loaded = set(ast.literal_eval(kinds))
    assert "comparison" in loaded
    assert not loaded & set(OTHER_KINDS), loaded


def test_the_server_pool_imports_httpx_only_to_poll_a_starting_server() -> None:
    """An in-process run creates the server pool (``state.generation_cache_for``) but starts
    no server: importing :mod:`.servers` must not import httpx."""
    code = "import sys, pytest_infercheck.servers\nprint('httpx' in sys.modules)\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_a_kind_outlives_no_module_dropped_from_sys_modules() -> None:
    """pytester's in-process runs drop from ``sys.modules`` the modules they imported: a kind
    first asked for inside one must not be kept afterwards, its records' annotations no
    longer resolve (``TypeAdapter[PromptComparison] is not fully defined`` when the HTML
    report of a results file was rendered after such a run, in a test file run alone)."""
    code = (
        "import sys\n"
        "from pytest_infercheck.checks.registry import kind_named\n"
        "from pytest_infercheck.records import plain_data\n"
        "from tests.unit.factories import prompt_comparison\n"
        "data = plain_data(prompt_comparison('a', [0.0, 0.1]))\n"
        "kind_named('compare')\n"
        "for name in [m for m in sys.modules if m.startswith('pytest_infercheck.checks.comp')]:\n"
        "    del sys.modules[name]\n"
        "kind = kind_named('compare')\n"
        "fresh = sys.modules['pytest_infercheck.checks.comparison'].COMPARE\n"
        "assert kind is fresh\n"
        "print('<table' in kind.present.views['prompt'](data))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root)
    assert out.returncode == 0 and out.stdout.strip() == "True", out.stderr
