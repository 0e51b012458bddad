"""Golden baselines: a target's outputs recorded in a small file meant to be committed, and
replayed later as the baseline of a ``compare`` (the engine-upgrade gate).

Recording (``pytest --infercheck-record``): a check ``compare: {baseline: golden:adder-v1,
test: adder@local}`` records its test side into ``<golden_dir>/adder-v1.json`` (``goldens``
next to the matrix by default; ``.json.gz`` with ``golden_gzip: true``). Without the option
the same check replays that file as its baseline, so a new engine is compared with what the
old one produced without the old engine installed.

- :mod:`.names`: the ``golden:NAME`` reference, the names allowed, where a golden may stand
  in a check, and the file a name stands for;
- :mod:`.file`: the file format; entries and header, deterministic atomic writing, loading,
  the refusals of a golden as a test side's baseline;
- :mod:`.replay`: the backend that replays a golden file, and whether a comparison can score
  the test side against it;
- :mod:`.record`: a compare check's golden side: recording its test side, verifying a replay;
- :mod:`.writer`: the controller's plugin that writes the recorded goldens at session end.

Nothing here loads numpy, mlx or httpx at import time: the plugin imports it on start-up.
"""

from .file import (
    GoldenError,
    GoldenFile,
    dumps,
    load_golden,
    make_entry,
    make_header,
    replay_problems,
    top_k_maps,
    top_k_rows,
    write_golden,
)
from .names import GOLDEN_NAME, GOLDEN_PLACE, GOLDEN_PREFIX, golden_path
from .record import golden_name, record_prompts, replay_lines, verify_replay
from .replay import GOLDEN_KIND, GoldenBackend, golden_scorable
from .writer import GoldenWriter

__all__ = [
    "GOLDEN_KIND",
    "GOLDEN_NAME",
    "GOLDEN_PLACE",
    "GOLDEN_PREFIX",
    "GoldenBackend",
    "GoldenError",
    "GoldenFile",
    "GoldenWriter",
    "dumps",
    "golden_name",
    "golden_path",
    "golden_scorable",
    "load_golden",
    "make_entry",
    "make_header",
    "record_prompts",
    "replay_lines",
    "replay_problems",
    "top_k_maps",
    "top_k_rows",
    "verify_replay",
    "write_golden",
]
