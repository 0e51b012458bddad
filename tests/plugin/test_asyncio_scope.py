"""The ``pytest.ini`` of the quickstart and of ``pytest-infercheck init`` sets pytest-asyncio's
``asyncio_default_fixture_loop_scope``: with pytest-asyncio installed, no
PytestDeprecationWarning prints (without the line it does); without pytest-asyncio the plugin
declares the key, so no "Unknown config option" warning prints either."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from conftest import REPO
from pytest_infercheck import options
from pytest_infercheck.scaffold.matrix_text import PYTEST_INI

QUICKSTART_INI = (REPO / "examples" / "quickstart" / "pytest.ini").read_text()
TEST = "def test_one():\n    pass\n"


@pytest.mark.parametrize("ini", [QUICKSTART_INI, PYTEST_INI], ids=["quickstart", "init"])
def test_no_deprecation_warning_with_pytest_asyncio(pytester: pytest.Pytester, ini: str) -> None:
    pytest.importorskip("pytest_asyncio")
    pytester.makefile(".ini", pytest=ini)
    pytester.makepyfile(test_one=TEST)
    done = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    done.assert_outcomes(passed=1)
    assert "PytestDeprecationWarning" not in done.stdout.str() + done.stderr.str()
    assert "warnings summary" not in done.stdout.str()

    # Without the line, pytest-asyncio warns: the test above can see the warning.
    pytester.makefile(".ini", pytest="[pytest]\n")
    bare = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    assert "PytestDeprecationWarning" in bare.stdout.str() + bare.stderr.str()


def test_no_unknown_option_warning_without_pytest_asyncio(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "pytest_asyncio" else real(name, *args)

    monkeypatch.setattr(options.importlib.util, "find_spec", find_spec)
    pytester.makefile(".ini", pytest=PYTEST_INI)
    pytester.makepyfile(test_one=TEST)
    done = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider")
    done.assert_outcomes(passed=1)
    assert "Unknown config option" not in done.stdout.str()

    monkeypatch.setattr(options, "add_asyncio_scope", lambda parser: None)
    undeclared = pytester.runpytest("-p", "no:asyncio", "-p", "no:cacheprovider")
    assert "Unknown config option: asyncio_default_fixture_loop_scope" in undeclared.stdout.str()
