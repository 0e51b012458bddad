"""Pure metric functions (numpy + stdlib only, no engine imports).

* :mod:`.kl` - per-position KL / top-1 agreement / chosen-token delta, top-k KL lower bound.
* :mod:`.faults` - the one fault type of every kind: its text, aggregate and JSON forms.
* :mod:`.finite` - the fail-closed rule: non-finite values, row normalisation, empty sides.
* :mod:`.stats` - Wilson interval, exact McNemar, clustered mean/SE, distribution summaries.
* :mod:`.text` - first token divergence, text similarity, severity tiers.
* :mod:`.sampling` - sampling conformance: each engine's expected distribution, G-test,
  detectable distance, Holm, penalties.
* :mod:`.answers` - final-answer extraction/normalisation and answer-flip classification.
"""
