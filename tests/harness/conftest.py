"""Hypothesis profiles of the verdict harness.

- ``ci`` (selected when ``CI`` is set to anything but ``0``/``false``, or with
  ``HYPOTHESIS_PROFILE=ci``): derandomized (the same examples on every run: a failure is
  reproducible, and a strict xfail flips only when the code changes), bounded examples, no
  deadline (a shared CI machine is slow at times), no example database, and the failing
  example printed shrunk, with its reproduction blob;
- ``dev`` (otherwise): random examples, more of them, the database kept in ``.hypothesis``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

CI_EXAMPLES = 25

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=CI_EXAMPLES,
    deadline=None,
    print_blob=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    phases=[Phase.explicit, Phase.generate, Phase.shrink, Phase.explain],
)
settings.register_profile(
    "dev",
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if _ci() else "dev"))
