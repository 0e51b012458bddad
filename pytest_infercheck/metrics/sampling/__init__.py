"""Statistics of sampling conformance (issue 28), pure: numpy and the standard library only.

One job per module:

* :mod:`.params` - :class:`SamplingParams`, :class:`Expected`, the input checks.
* :mod:`.engines` - each engine's documented order of temperature, top-k, top-p and min-p:
  :func:`expected_distribution`.
* :mod:`.gamma` - the chi-square distribution without scipy: regularized incomplete gamma,
  survival function, quantile, noncentral survival.
* :mod:`.fit` - :func:`goodness_of_fit` (G-test with pooling), :class:`Fit`.
* :mod:`.exact` - :func:`g_test_p_value`: the G statistic's p-value, valid at finite counts
  (chi-square far from the levels, Agrawal's bound, else sequential Monte Carlo).
* :mod:`.power` - :func:`detectable_tv`: the smallest total-variation distance a test sees;
  :func:`samples_needed` for a distance.
* :mod:`.processed` - :func:`compare_processed`: an engine's reported processed distribution
  (llama-server ``post_sampling_probs``, vLLM ``processed_logprobs``) against the expected.
* :mod:`.seeds` - :func:`agreement_probability`: how often two seeds agree by chance.
* :mod:`.holm` - :func:`holm` step-down over the items of a check.
* :mod:`.penalties` - :func:`penalized_logits`: presence, frequency, repetition penalties and
  ``logit_bias`` per engine.
"""

from .engines import ENGINES, expected_distribution
from .exact import GTestP, agrawal_bound, g_test_p_value, monte_carlo_p
from .fit import Fit, goodness_of_fit
from .gamma import chi2_isf, chi2_sf, ncx2_sf, regularized_gamma_q
from .holm import holm
from .params import Expected, SamplingParams, pooled
from .penalties import Penalties, penalized_logits, penalized_logprobs
from .power import detectable_tv, samples_needed
from .processed import ProcessedGap, compare_processed
from .seeds import agreement_probability, all_agree_probability

__all__ = [
    "ENGINES",
    "Expected",
    "Fit",
    "GTestP",
    "Penalties",
    "ProcessedGap",
    "SamplingParams",
    "agrawal_bound",
    "agreement_probability",
    "all_agree_probability",
    "chi2_isf",
    "chi2_sf",
    "compare_processed",
    "detectable_tv",
    "expected_distribution",
    "g_test_p_value",
    "goodness_of_fit",
    "holm",
    "monte_carlo_p",
    "ncx2_sf",
    "penalized_logits",
    "penalized_logprobs",
    "pooled",
    "regularized_gamma_q",
    "samples_needed",
]
