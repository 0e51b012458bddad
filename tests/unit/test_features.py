"""The pure parts of lossless and budgeted features: vLLM's /metrics text, activity deltas,
llama-server's timings, mlx-lm's drafted-token count, declared features, the engagement
rule, and backend options refused at their line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from pytest_infercheck.backends.llama_server import TIMINGS_SOURCE, timings_activity
from pytest_infercheck.backends.registry import backend_spec
from pytest_infercheck.backends.vllm_metrics import (
    ACCEPTED,
    DRAFT_TOKENS,
    GENERATED,
    PREFIX_HITS,
    activity_delta,
    counted,
    parse_counters,
)
from pytest_infercheck.config import load_matrix
from pytest_infercheck.features import (
    KV_QUANTIZATION,
    SPECULATIVE,
    Feature,
    FeatureActivity,
    declared_features,
    drafted_tokens,
    feature_record,
    unexercised,
)
from pytest_infercheck.yamlpos import SourceError

METRICS = """\
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 3.0
vllm:spec_decode_num_draft_tokens_created{engine="0",model_name="m"} 1.795692080476e+09
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 2.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",position="0"} 1.0
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 16.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 32.0
vllm:generation_tokens_total{engine="0",model_name="m"} 40.0
"""


def test_parse_counters_sums_label_sets_and_ignores_the_rest() -> None:
    counters = parse_counters(METRICS)
    assert counters == {DRAFT_TOKENS: 3.0, ACCEPTED: 2.0, PREFIX_HITS: 48.0, GENERATED: 40.0}


def test_activity_delta_by_hand() -> None:
    """after - before: 9 - 3 drafted, 5 - 2 accepted, 64 - 48 cached prompt tokens."""
    before = parse_counters(METRICS)
    after = {DRAFT_TOKENS: 9.0, ACCEPTED: 5.0, PREFIX_HITS: 64.0, GENERATED: 56.0}
    activity = activity_delta(before, after)
    assert (activity.drafted, activity.accepted, activity.cache_hit_tokens) == (6, 3, 16)
    assert "server-wide" in activity.source


def test_activity_delta_refuses_what_is_not_a_count() -> None:
    """A counter missing from a reading, one that went down (a restarted server) and a NaN
    give None, never a number."""
    before = {DRAFT_TOKENS: 9.0, ACCEPTED: math.nan}
    after = {DRAFT_TOKENS: 2.0, ACCEPTED: 4.0, PREFIX_HITS: 1.0}
    activity = activity_delta(before, after)
    assert (activity.drafted, activity.accepted, activity.cache_hit_tokens) == (None, None, None)


def test_counted_waits_for_the_generated_tokens() -> None:
    assert not counted({GENERATED: 40.0}, {GENERATED: 50.0}, 16)
    assert counted({GENERATED: 40.0}, {GENERATED: 56.0}, 16)
    assert counted({}, {}, 16)


def test_llama_timings_activity_by_hand() -> None:
    """``draft_n`` drafted, ``draft_n_accepted`` accepted, ``cache_n`` cached prompt tokens
    (a /completion answer of a server started with ``-md ... --spec-type draft-simple``)."""
    timings = {"cache_n": 2, "prompt_n": 7, "predicted_n": 4, "draft_n": 6, "draft_n_accepted": 1}
    activity = timings_activity(timings)
    assert activity is not None and activity.source == TIMINGS_SOURCE
    assert (activity.drafted, activity.accepted, activity.cache_hit_tokens) == (6, 1, 2)


def test_llama_timings_without_draft_counts_drafted_nothing() -> None:
    """llama-server writes ``draft_n`` only when a token was drafted: timings without it
    are 0 drafted, 0 accepted, so a draft server that never drafts is unexercised; an
    answer without timings reports nothing (None)."""
    activity = timings_activity({"cache_n": 0, "prompt_n": 7, "predicted_n": 3})
    assert activity is not None
    assert (activity.drafted, activity.accepted, activity.cache_hit_tokens) == (0, 0, 0)
    assert unexercised([Feature(SPECULATIVE, "-md d.gguf")], activity) == [
        "speculative decoding never engaged: nothing drafted"
    ]
    assert timings_activity(None) is None
    assert timings_activity([6, 1]) is None


def test_llama_timings_refuse_what_is_not_a_count() -> None:
    activity = timings_activity({"cache_n": -1, "draft_n": "6", "draft_n_accepted": True})
    assert activity is not None
    assert (activity.drafted, activity.accepted, activity.cache_hit_tokens) == (None, None, None)


@pytest.mark.parametrize(
    ("flags", "max_tokens", "num_draft", "drafted"),
    [
        # rounds start at 0 and after each False: min(8 - 0, 3) = 3
        ([True, True, True], 8, 3, 3),
        # starts 0, 3 (after the False at 2), 4: min(5, 3) + min(2, 3) + min(1, 3) = 6
        ([True, True, False, False, True], 5, 3, 6),
        # a start at len(flags) (after the last False) is no round
        ([False], 8, 2, 2),
        ([False, False], 8, 0, 0),
    ],
)
def test_drafted_tokens_by_hand(
    flags: list[bool], max_tokens: int, num_draft: int, drafted: int
) -> None:
    assert drafted_tokens(flags, max_tokens, num_draft) == drafted


def test_unexercised_rules() -> None:
    spec = Feature(SPECULATIVE, "draft")
    kv = Feature(KV_QUANTIZATION, "4 bits from token 0", kv_bits=4)
    server_kv = Feature(KV_QUANTIZATION, "--kv-cache-dtype fp8", kv_bits=8, server_wide=True)
    assert unexercised([spec, kv], FeatureActivity(drafted=3, accepted=0, kv_bits=None)) == [
        "KV cache quantization never engaged: the cache stayed at full precision "
        "(4 bits from token 0)"
    ]
    assert unexercised([spec], FeatureActivity(drafted=0, accepted=0)) == [
        "speculative decoding never engaged: nothing drafted"
    ]
    assert unexercised([spec], None) == [
        "speculative decoding: the engine reported no draft counts"
    ]
    assert unexercised([spec], FeatureActivity(accepted=2)) == []
    assert unexercised([kv], FeatureActivity(kv_bits=4)) == []
    assert unexercised([server_kv], None) == []


def test_declared_features_from_serve_commands() -> None:
    vllm = backend_spec(
        {
            "kind": "vllm",
            "serve": """python -m vllm --port {port} --kv-cache-dtype=fp8 """
            """--speculative-config '{"method":"ngram","num_speculative_tokens":3}'""",
        }
    )
    assert [f.describe() for f in declared_features(vllm)] == [
        "KV cache quantization (--kv-cache-dtype fp8)",
        'speculative decoding (ngram (--speculative-config {"method":"ngram",'
        '"num_speculative_tokens":3}))',
    ]
    llama = backend_spec(
        {
            "kind": "llama-server",
            "serve": "llama-server -m {model} --port {port} -md d.gguf -ctk f16",
        }
    )
    assert [f.name for f in declared_features(llama)] == [SPECULATIVE]
    for flags, names in [
        ("--spec-draft-model d.gguf --spec-type draft-simple", [SPECULATIVE]),
        ("--spec-type ngram-simple", [SPECULATIVE]),
        ("--spec-type none", []),
        ("-fa on -ctk q8_0 -ctv q8_0", [KV_QUANTIZATION]),
    ]:
        spec = backend_spec(
            {"kind": "llama-server", "serve": f"llama-server -m {{model}} --port {{port}} {flags}"}
        )
        assert [f.name for f in declared_features(spec)] == names, flags
    kv8 = backend_spec(
        {"kind": "llama-server", "serve": "llama-server --port {port} -ctk q8_0 -ctv q8_0"}
    )
    assert declared_features(kv8) == (
        Feature(KV_QUANTIZATION, "-ctk q8_0", kv_bits=8, server_wide=True),
    )
    plain = backend_spec(
        {"kind": "vllm", "serve": "python -m vllm --port {port} --kv-cache-dtype auto"}
    )
    assert declared_features(plain) == ()
    mlx = backend_spec({"kind": "mlx-lm", "kv_bits": 8, "quantized_kv_start": 0})
    (kv,) = declared_features(mlx)
    assert (kv.kv_bits, kv.detail) == (8, "8 bits from token 0")


def test_a_server_wide_cache_quantization_records_its_bits() -> None:
    """Neither llama-server nor vLLM reports its cache type per request: a server-wide
    cache quantization's record carries its declared bits; bits an engine reports win; an
    in-process quantization's bits come only from the engine."""
    server = Feature(KV_QUANTIZATION, "-ctk q8_0", kv_bits=8, server_wide=True)
    seen = FeatureActivity(drafted=0, accepted=0, cache_hit_tokens=0, source="timings")
    record = feature_record("test", "adder@kv8", [server], seen)
    assert (record.kv_bits, record.unexercised) == (8, [])
    assert feature_record("test", "t", [server], None).kv_bits == 8
    assert feature_record("test", "t", [server], FeatureActivity(kv_bits=4)).kv_bits == 4
    local = Feature(KV_QUANTIZATION, "4 bits from token 0", kv_bits=4)
    assert feature_record("test", "t", [local], seen).kv_bits is None


def _errors(tmp_path: Path, backends: str) -> list[str]:
    (tmp_path / "draft").mkdir()
    path = tmp_path / "infercheck.yaml"
    path.write_text(
        f"models:\n  m: {{path: {tmp_path}, gguf: x.gguf}}\nbackends:\n{backends}"
        "suites: [reasoning]\nchecks:\n  - diff: {model: m, backends: [a, b]}\n"
    )
    with pytest.raises(SourceError) as info:
        load_matrix(path)
    return [f"{e.line}: {e.reason}" for e in info.value.each()]


def test_an_option_of_another_kind_is_an_error_at_its_line(tmp_path: Path) -> None:
    backends = (
        "  a: {kind: mlx-lm}\n"  # line 4
        "  b:\n"
        "    kind: llama-server\n"
        "    url: http://127.0.0.1:1\n"
        "    kv_bits: 4\n"  # line 8
    )
    assert _errors(tmp_path, backends) == [
        "8: backends.b.kv_bits: kv_bits is an option of mlx-lm backends, not of a "
        "llama-server backend"
    ]


def test_option_values_and_combinations_are_errors_at_their_lines(tmp_path: Path) -> None:
    backends = (
        "  a:\n"
        "    kind: mlx-lm\n"
        "    num_draft_tokens: 3\n"  # line 6: without draft_model
        "    kv_group_size: 32\n"  # line 7: without kv_bits
        "  b:\n"
        "    kind: mlx-lm\n"
        "    draft_model: ./nowhere\n"  # line 10
        "    kv_bits: 7\n"  # line 11
    )
    assert _errors(tmp_path, backends) == [
        "6: backends.a.num_draft_tokens: num_draft_tokens needs draft_model",
        "7: backends.a.kv_group_size: kv_group_size needs kv_bits",
        "11: backends.b.kv_bits: expected 2, 3, 4, 5, 6 or 8, got 7",
    ]


def test_a_draft_model_is_resolved_against_the_yaml(tmp_path: Path) -> None:
    (tmp_path / "draft").mkdir()
    path = tmp_path / "infercheck.yaml"
    path.write_text(
        f"models:\n  m: {{path: {tmp_path}}}\nbackends:\n  a: {{kind: mlx-lm}}\n"
        "  b: {kind: mlx-lm, draft_model: draft, num_draft_tokens: 0}\n"
        "suites: [reasoning]\nchecks:\n  - diff: {model: m, backends: [a, b]}\n"
    )
    options = load_matrix(path).matrix.backends["b"].options
    assert options is not None
    assert options.written() == {"draft_model": str(tmp_path / "draft"), "num_draft_tokens": 0}


def test_a_missing_draft_model_fails_the_backend_naming_the_folder(
    tmp_path: Path, tiny_models: dict[str, Path]
) -> None:
    """A draft folder need not exist when the matrix loads (like a model's path); the
    backend's first generation fails naming it."""
    import asyncio

    from pytest_infercheck.backends import BackendError, GenerationParams
    from pytest_infercheck.backends.mlx_lm import MlxLmBackend, MlxModelSpec
    from pytest_infercheck.backends.options import MlxLmOptions

    missing = tmp_path / "no-draft"
    options = MlxLmOptions(draft_model=str(missing), num_draft_tokens=2)
    backend = MlxLmBackend("b", MlxModelSpec(str(tiny_models["bf16"])), options=options)
    prompt = asyncio.run(backend.render("1+2=", None, False))
    with pytest.raises(BackendError, match=f"could not load '{missing}'"):
        asyncio.run(backend.generate(prompt, GenerationParams(max_tokens=4)))


def test_require_engaged_with_no_declared_feature_is_an_error_at_its_line(tmp_path: Path) -> None:
    """A gate that would never apply: neither backend of the diff turns on a feature, so
    ``require_engaged: true`` could judge nothing. With a draft model on one side it loads."""
    from pytest_infercheck.config import NOTHING_TO_ENGAGE

    (tmp_path / "draft").mkdir()
    path = tmp_path / "infercheck.yaml"
    head = f"models:\n  m: {{path: {tmp_path}}}\nbackends:\n  a: {{kind: mlx-lm}}\n"
    tail = (
        "suites: [reasoning]\nchecks:\n  - diff: {model: m, backends: [a, b]}\n"
        "    require_engaged: true\n"  # line 9
    )
    path.write_text(head + "  b: {kind: mlx-lm}\n" + tail)
    with pytest.raises(SourceError) as info:
        load_matrix(path)
    assert [f"{e.line}: {e.reason}" for e in info.value.each()] == [
        f"9: checks[0].require_engaged: {NOTHING_TO_ENGAGE}"
    ]
    path.write_text(head + "  b: {kind: mlx-lm, draft_model: draft}\n" + tail)
    assert load_matrix(path).matrix.checks[0].kind_thresholds().require_engaged  # type: ignore[attr-defined]
