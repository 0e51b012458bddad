"""A ``serve:`` command becomes arguments (``servers.fill_command``) and is checked at
collection (``servers.serve_problems``): only ``{model}`` and ``{port}`` are placeholders."""

from __future__ import annotations

from pytest_infercheck.servers import exit_description, fill_command, serve_problems

SPECULATIVE = '{"method": "ngram", "num_speculative_tokens": 3}'


def test_json_braces_reach_the_server_as_written() -> None:
    """Before: ``str.format`` raised ``KeyError: '"method"'`` on this command."""
    command = f"vllm serve {{model}} --port {{port}} --speculative-config '{SPECULATIVE}'"
    assert fill_command(command, "/models/q", 8123) == [
        "vllm",
        "serve",
        "/models/q",
        "--port",
        "8123",
        "--speculative-config",
        SPECULATIVE,
    ]
    assert serve_problems(command) == []


def test_placeholders_are_filled_inside_arguments_and_a_path_with_spaces_stays_one() -> None:
    command = "sh -c 'echo $$ > pid; exec srv -m {model} --port {port}' --x=${HOME}/{port}"
    assert fill_command(command, "/my models/q", 9) == [
        "sh",
        "-c",
        "echo $$ > pid; exec srv -m /my models/q --port 9",
        "--x=${HOME}/9",
    ]
    assert fill_command("srv -m {model} --port {port}", "/my models/q", 9)[2] == "/my models/q"


def test_what_is_certainly_wrong() -> None:
    assert serve_problems("srv --model {modle} --port {port} --t {threads}") == [
        "unknown placeholder {modle}: only {model} and {port} are filled in (other braces, "
        "such as JSON, are passed as they are)",
        "unknown placeholder {threads}: only {model} and {port} are filled in (other braces, "
        "such as JSON, are passed as they are)",
    ]
    assert serve_problems("srv --model {model}") == [
        "it must contain {port} (the plugin picks a free port and waits on it)"
    ]
    assert serve_problems("srv --port {port} --x 'unclosed") == [
        "cannot split it into arguments: No closing quotation"
    ]
    # a shell's ${VAR} and a Go template's {{.Name}} are not placeholders
    assert serve_problems("sh -c 'srv --port {port} --home ${HOME} --f {{.Name}}'") == []


def test_exit_descriptions() -> None:
    assert exit_description(3) == "code 3"
    assert exit_description(-9) == "code -9, killed by SIGKILL"
    assert exit_description(None) == "code unknown"
