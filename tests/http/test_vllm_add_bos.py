"""vLLM's ``add_bos`` (raw prompts): the tokenizer's BOS (``tokenizer_config.json``'s
``bos_token``, its id by the server's ``/tokenize``) prepended to ids that lack it, as for
the tiny adder, whose tokenizer adds none (a scripted local server stands for vLLM's
``/tokenize`` and ``/detokenize``; the real server is in
``tests/integration/test_sampling_vllm.py``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from pytest_infercheck.backends import create_backend
from pytest_infercheck.backends.base import BackendError
from pytest_infercheck.backends.registry import backend_spec

from .fake_server import Reply, Script, fake_server


def _folder(tmp_path: Path, config: dict[str, object]) -> Path:
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


def _render(url: str, folder: Path, **keys: object) -> object:
    spec = backend_spec({"kind": "vllm", "url": url, "chat": False, **keys})
    backend = create_backend("v", spec, str(folder), None)
    return asyncio.run(backend.render("31+", None, False))


def test_add_bos_prepends_the_tokenizers_bos_to_raw_ids(tmp_path: Path) -> None:
    script = Script(
        [
            Reply(body={"tokens": [54, 52, 46]}),  # /tokenize "31+": no BOS added
            Reply(body={"tokens": [1]}),  # /tokenize "<s>" (no special tokens added)
            Reply(body={"prompt": "<s>31+"}),  # /detokenize
        ]
    )
    with fake_server(script) as url:
        rendered = _render(url, _folder(tmp_path, {"bos_token": "<s>"}), add_bos=True)
    assert rendered.token_ids == (1, 54, 52, 46) and rendered.text == "<s>31+"  # type: ignore[attr-defined]
    sent = [(r["path"], r["json"].get("prompt"), r["json"].get("tokens")) for r in script.requests]
    assert sent == [
        ("/tokenize", "31+", None),
        ("/tokenize", "<s>", None),
        ("/detokenize", None, [1, 54, 52, 46]),
    ]


def test_without_add_bos_the_ids_are_vllms_own(tmp_path: Path) -> None:
    script = Script([Reply(body={"tokens": [54, 52, 46]}), Reply(body={"prompt": "31+"})])
    with fake_server(script) as url:
        rendered = _render(url, _folder(tmp_path, {"bos_token": "<s>"}))
    assert rendered.token_ids == (54, 52, 46)  # type: ignore[attr-defined]


def test_ids_that_start_with_the_bos_are_left_alone(tmp_path: Path) -> None:
    script = Script(
        [
            Reply(body={"tokens": [1, 54, 52, 46]}),
            Reply(body={"tokens": [1]}),
            Reply(body={"prompt": "<s>31+"}),
        ]
    )
    with fake_server(script) as url:
        rendered = _render(url, _folder(tmp_path, {"bos_token": "<s>"}), add_bos=True)
    assert rendered.token_ids == (1, 54, 52, 46)  # type: ignore[attr-defined]


def test_add_bos_without_a_bos_token_is_an_error_saying_so(tmp_path: Path) -> None:
    script = Script([Reply(body={"tokens": [54, 52, 46]})])
    with fake_server(script) as url, pytest.raises(BackendError, match="naming a bos_token"):
        _render(url, _folder(tmp_path, {"eos_token": "</s>"}), add_bos=True)
