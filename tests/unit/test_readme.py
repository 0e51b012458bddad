"""README.md is a landing page whose every command, link and matrix is the real thing: the two
commands are what CI runs, the install line's extras exist, every link lands on a file, its
vLLM matrix is the tutorial's (run against vLLM by
``tests/integration/test_docs_tutorial_vllm.py``), every check kind has its line, and the
page stays short (what it leaves out is in ``docs/``: ``scripts/check_docs_cover.py``)."""

from __future__ import annotations

import re

import yaml

from conftest import REPO
from pytest_infercheck.checks.registry import KIND_NAMES

README = REPO / "README.md"
TEXT = README.read_text()


def _blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", TEXT, re.S | re.M)


def test_is_a_landing_page() -> None:
    assert len(TEXT.splitlines()) <= 250


def test_the_two_commands_come_first_and_are_what_ci_runs() -> None:
    first = TEXT.split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    assert TEXT.index("```bash") < TEXT.index("\n## ")
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert all(command in ci for command in commands)


def test_the_install_line_names_extras_that_exist() -> None:
    project = (REPO / "pyproject.toml").read_text()
    section = project.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    extras = set(re.findall(r"^([\w-]+) = \[", section, re.M))
    assert {"mlx", "html", "docs", "dev"} <= extras
    installs = re.findall(r'pip install -e "\.\[([\w,]+)\]"', TEXT)
    assert installs and all(set(i.split(",")) <= set(extras) for i in installs)
    table = set(re.findall(r"^\| `([\w-]+)` \| ", TEXT, re.M)) & set(extras)
    assert table == set(extras)  # every extra in the table


def test_every_link_lands_on_a_file() -> None:
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", TEXT)
    assert len(links) >= 20
    for link in links:
        assert (REPO / link).exists(), link


def test_every_check_kind_has_its_line() -> None:
    rows = dict(re.findall(r"^\| \[([\w-]+)\]\((docs/[^)#]+)", TEXT, re.M))
    assert set(rows) == set(KIND_NAMES)


def test_the_vllm_matrix_is_the_tutorials() -> None:
    tutorial = (REPO / "docs" / "tutorials" / "first-check-vllm.md").read_text()
    first = re.search(r"^```yaml\n(.*?)^```", tutorial, re.S | re.M)
    assert first is not None
    (matrix,) = [b for b in _blocks("yaml") if "your running vLLM" in b]
    assert matrix == first.group(1)
    assert (
        len(matrix.splitlines()) <= 16
        and yaml.safe_load(matrix)["backends"]["vllm"]["kind"] == "vllm"
    )
