"""Loading the plugin stays cheap: `pytest --help` in a project with the plugin installed
must not pay for mlx, numpy, httpx or pydantic."""

from __future__ import annotations

import subprocess
import sys


def test_plugin_module_imports_nothing_heavy() -> None:
    code = (
        "import sys, pytest_infercheck.plugin\n"
        "heavy = ('mlx', 'mlx_lm', 'numpy', 'httpx', 'pydantic')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
