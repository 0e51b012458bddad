"""The names of the check kinds. No imports, so that reports and the plugin's start-up can
use them without loading the config models (pydantic)."""

COMPARISON_KINDS = ("compare", "sweep", "diff")
"""A test side against a baseline."""

TARGET_KINDS = (
    "determinism",
    "stress",
    "batch-invariance",
    "stream-parity",
    "endpoint-parity",
    "cache-pollution",
)
"""One ``model@backend`` on its own."""

CHECK_KINDS = COMPARISON_KINDS + TARGET_KINDS
