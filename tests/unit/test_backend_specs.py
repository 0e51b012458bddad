"""Each backend kind's spec takes exactly the keys its engine honours.

The table :data:`HONOURED` is read from the code, not from the specs: each kind's ``create``
(which keys of its entry it passes to its engine), :meth:`.backends.http.HttpSettings.of`
(a server's client), :func:`.servers.server_spec` (a started server) and the comparisons
(mlx-lm's ``batching``). Every key a kind takes reaches its engine (asserted on the backend
built, nothing loaded or contacted); every key another kind takes is refused on an entry of
this one, at its line, naming the kinds that take it (as a threshold of another check kind
is), where the old single ``BackendSpec`` accepted it and nothing read it.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from pytest_infercheck.backends import create_backend
from pytest_infercheck.backends.registry import BACKENDS, KEY_OWNERS, backend_spec
from pytest_infercheck.config import load_matrix
from pytest_infercheck.servers import server_spec
from pytest_infercheck.yamlpos import SourceError

SERVER = {
    "url",
    "serve",
    "env",
    "health_path",
    "startup_timeout",
    "api_key_env",
    "timeout",
    "max_concurrency",
    "retries",
}
MLX_OPTIONS = {
    "draft_model",
    "num_draft_tokens",
    "kv_bits",
    "kv_group_size",
    "quantized_kv_start",
    "prefill_step_size",
    "max_kv_size",
}
OPENAI = {"chat", *SERVER, "model_name", "logprobs"}
HONOURED: dict[str, set[str]] = {
    # mlx_lm.create: chat, add_bos, dtype, the options; batching: the comparisons' licence.
    "mlx-lm": {"chat", "add_bos", "dtype", "batching", *MLX_OPTIONS},
    # openai_compat.create_served: chat, model_name, logprobs (no_logprobs), HttpSettings.of.
    "openai": OPENAI,
    # vllm.create: add_bos besides (raw prompts: the tokenizer's BOS prepended).
    "vllm": {*OPENAI, "add_bos"},
    "vllm-mlx": OPENAI,
    # sglang.create: chat, model_name, HttpSettings.of; its native /generate always asks
    # for logprobs (the entry's logprobs was never read).
    "sglang": {"chat", *SERVER, "model_name"},
    # llama_server.create: chat, HttpSettings.of; it names no model in its requests.
    "llama-server": {"chat", *SERVER},
    # ollama.create: chat, model_name, HttpSettings.of.
    "ollama": {"chat", *SERVER, "model_name"},
}
VALUES: dict[str, Any] = {
    "chat": True,
    "url": "http://127.0.0.1:9",
    "serve": "srv -m {model} --port {port}",
    "env": {"A": "b"},
    "health_path": "/ready",
    "startup_timeout": 60,
    "api_key_env": "MY_KEY",
    "timeout": 30,
    "max_concurrency": 8,
    "retries": 1,
    "model_name": "served",
    "logprobs": False,
    "add_bos": False,
    "dtype": "float32",
    "batching": False,
    "draft_model": "./draft",
    "num_draft_tokens": 3,
    "kv_bits": 4,
    "kv_group_size": 32,
    "quantized_kv_start": 0,
    "prefill_step_size": 64,
    "max_kv_size": 512,
}


def test_the_registry_is_the_table() -> None:
    assert {kind.name for kind in BACKENDS} == set(HONOURED)


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_each_kind_takes_exactly_the_keys_its_engine_honours(kind: Any) -> None:
    assert set(kind.spec.model_fields) - {"kind"} == HONOURED[kind.name]


def test_the_owners_of_each_key_are_the_kinds_that_honour_it() -> None:
    for key, owners in KEY_OWNERS.items():
        assert owners == [k for k, keys in HONOURED.items() if key in keys or key == "kind"]


# -- every key a kind takes reaches its engine ------------------------------------------------
def _served(name: str, **keys: Any) -> Any:
    return create_backend("b", backend_spec({"kind": name, **keys}), "/models/tiny", None)


@pytest.mark.parametrize("name", ["openai", "vllm", "vllm-mlx", "sglang", "llama-server", "ollama"])
def test_a_servers_client_keys_reach_its_http_client(name: str) -> None:
    keys = {k: VALUES[k] for k in ("url", "api_key_env", "timeout", "max_concurrency", "retries")}
    settings = _served(name, **keys).http.settings
    assert (settings.base_url, settings.api_key_env) == ("http://127.0.0.1:9", "MY_KEY")
    assert (settings.timeout_s, settings.max_concurrency, settings.retries) == (30, 8, 1)


@pytest.mark.parametrize(
    ("name", "default"),
    [
        ("openai", True),
        ("vllm", True),
        ("vllm-mlx", True),
        ("ollama", True),
        ("sglang", False),
        ("llama-server", False),
    ],
)
def test_chat_reaches_every_server(name: str, default: bool) -> None:
    url = VALUES["url"]
    assert _served(name, url=url).chat is default
    assert _served(name, url=url, chat=not default).chat is (not default)


@pytest.mark.parametrize("name", ["openai", "vllm", "vllm-mlx", "sglang", "ollama"])
def test_model_name_is_the_model_a_server_is_asked_for(name: str) -> None:
    url = VALUES["url"]
    assert _served(name, url=url).model == "/models/tiny"
    assert _served(name, url=url, model_name="served").model == "served"


@pytest.mark.parametrize("name", ["openai", "vllm", "vllm-mlx"])
def test_logprobs_false_turns_the_negotiation_off(name: str) -> None:
    backend = _served(name, url=VALUES["url"], logprobs=False)
    assert "logprobs: false in the matrix" in backend.no_logprobs


@pytest.mark.parametrize("name", ["openai", "vllm", "vllm-mlx", "sglang", "llama-server", "ollama"])
def test_a_started_servers_keys_reach_its_server_spec(name: str) -> None:
    keys = {k: VALUES[k] for k in ("serve", "env", "health_path", "startup_timeout")}
    started = server_spec(backend_spec({"kind": name, **keys}), "/models/tiny")
    assert (started.command, started.model) == (VALUES["serve"], "/models/tiny")
    assert (started.env, started.health_path, started.startup_timeout_s) == (
        (("A", "b"),),
        "/ready",
        60,
    )


def test_mlx_lms_keys_reach_its_engine(tmp_path: Path) -> None:
    options = {k: VALUES[k] for k in ("kv_bits", "kv_group_size", "quantized_kv_start")}
    entry = {"kind": "mlx-lm", "chat": False, "add_bos": False, "dtype": "float16", **options}
    spec = backend_spec({**entry, "prefill_step_size": 64}, {"base_dir": tmp_path})
    backend = create_backend("local", spec, "/models/tiny", None)
    assert (backend.chat, backend.add_bos, backend.spec.dtype) == (False, False, "float16")
    assert backend.options.written() == {**options, "prefill_step_size": 64}
    assert backend.options.cache_options() == {**options, "prefill_step_size": 64}
    drafted = backend_spec({"kind": "mlx-lm", "draft_model": "./d"}, {"base_dir": tmp_path})
    assert create_backend("local", drafted, "/m", None).options.draft_model == str(tmp_path / "d")
    assert backend_spec({"kind": "mlx-lm", "batching": False}).batching is False


# -- every key of another kind is refused at its line ------------------------------------------
MATRIX = """\
models: {{a: {{path: ./a, gguf: ./a.gguf}}}}
backends:
  local: {{kind: mlx-lm}}
  b:
    kind: {kind}
{keys}
suites: [reasoning]
checks: [{{compare: {{baseline: a@local, test: a@b}}}}]
"""


def _matrix(tmp_path: Path, kind: str, keys: dict[str, Any]) -> Path:
    lines = "\n".join(
        f"    {k}: {v!r}" if isinstance(v, str) else f"    {k}: {v}" for k, v in keys.items()
    )
    path = tmp_path / "infercheck.yaml"
    path.write_text(MATRIX.format(kind=kind, keys=lines.replace("'", '"')))
    return path


def _needed(kind: str) -> dict[str, Any]:
    """What an entry of ``kind`` needs besides the key under test (a server: its url)."""
    return {"url": VALUES["url"]} if "url" in HONOURED[kind] else {}


FOREIGN = [
    (kind, key)
    for kind, key in itertools.product(HONOURED, sorted(set().union(*HONOURED.values())))
    if key not in HONOURED[kind]
]


@pytest.mark.parametrize(("kind", "key"), FOREIGN, ids=[f"{k}-{key}" for k, key in FOREIGN])
def test_a_key_another_kind_honours_is_an_error_at_its_line_naming_them(
    tmp_path: Path, kind: str, key: str
) -> None:
    keys = {**_needed(kind), key: VALUES[key]}
    with pytest.raises(SourceError) as caught:
        load_matrix(_matrix(tmp_path, kind, keys))
    error = caught.value
    assert error.line == 6 + list(keys).index(key), str(error)
    owners = [k for k, honoured in HONOURED.items() if key in honoured]
    names = ", ".join(owners[:-1]) + (" and " if len(owners) > 1 else "") + owners[-1]
    if key in ("url", "serve"):
        said = f"a {kind} backend runs in-process: remove {key!r} (a key of {names} backends)"
    else:
        said = f"{key} is an option of {names} backends, not of a {kind} backend"
    assert str(error).endswith(f"backends.b.{key}: {said}"), str(error)


def test_a_vllm_entry_with_dtype_is_an_error_at_its_line(tmp_path: Path) -> None:
    """The old ``BackendSpec`` took ``dtype`` from any kind and only mlx-lm read it: a vLLM
    entry ran in its server's dtype, whatever the matrix said."""
    with pytest.raises(SourceError) as caught:
        load_matrix(_matrix(tmp_path, "vllm", {"url": VALUES["url"], "dtype": "float32"}))
    assert caught.value.line == 7
    assert str(caught.value).endswith(
        "backends.b.dtype: dtype is an option of mlx-lm backends, not of a vllm backend"
    )


@pytest.mark.parametrize("kind", HONOURED)
def test_each_kind_accepts_every_key_it_honours(tmp_path: Path, kind: str) -> None:
    """Every key at once (a server started with ``serve``, and separately attached at
    ``url``), each loaded with the value written."""
    started = {k: VALUES[k] for k in HONOURED[kind] if k != "url"}
    if kind == "mlx-lm":  # one feature at a time (mlx-lm cannot combine them)
        for key in ("draft_model", "num_draft_tokens", "max_kv_size"):
            started.pop(key)
    spec = load_matrix(_matrix(tmp_path, kind, started)).matrix.backends["b"]
    assert {k: getattr(spec, k) for k in started if k != "env"} == {
        k: v for k, v in started.items() if k != "env"
    }
    if "url" in HONOURED[kind]:
        attached = {
            k: VALUES[k]
            for k in HONOURED[kind] - {"serve", "env", "health_path", "startup_timeout"}
        }
        spec = load_matrix(_matrix(tmp_path, kind, attached)).matrix.backends["b"]
        assert spec.url == VALUES["url"] and spec.serve is None


@pytest.mark.parametrize("key", ["env", "health_path", "startup_timeout"])
def test_a_started_servers_key_on_an_attached_server_is_an_error_at_its_line(
    tmp_path: Path, key: str
) -> None:
    """``env``, ``health_path`` and ``startup_timeout`` are read only to start a server: on
    one attached at ``url`` nothing would read them."""
    with pytest.raises(SourceError) as caught:
        load_matrix(_matrix(tmp_path, "llama-server", {"url": VALUES["url"], key: VALUES[key]}))
    assert caught.value.line == 7
    assert f"backends.b.{key}: {key} applies to a server the plugin starts ('serve')" in str(
        caught.value
    )


@pytest.mark.parametrize("kind", BACKENDS, ids=lambda k: k.name)
def test_every_spec_answers_what_code_handling_every_kind_reads(kind: Any) -> None:
    """``url``, ``serve``, ``api_key_env``, ``logprobs``, ``batching``, ``chat`` and
    ``options`` are read on any backend entry (the managed servers, the repro bundle, the
    comparisons' batching licence): a kind whose entry does not take one answers what its
    engine does, without the key becoming writable."""
    entry = {"kind": kind.name, **_needed(kind.name)}
    spec = backend_spec(entry)
    served = "url" in HONOURED[kind.name]
    assert (spec.url, spec.serve) == ((VALUES["url"], None) if served else (None, None))
    assert spec.api_key_env is None and spec.chat is None
    assert spec.logprobs is True and spec.batching is True
    assert (spec.options is not None) == (kind.name == "mlx-lm")
