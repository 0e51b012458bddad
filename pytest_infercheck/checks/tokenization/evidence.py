"""The evidence of a tokenization item: each side's tokenization of the prompt (its ids, or
only a count), what was asked of its tokenizer where the two differ (special tokens, token
texts, the ids of the NFC-normalised text), and how the requests went. The check has no
gates, so no measures."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...metrics.tokenization import TokenSide
from ...verdict.conduct import Conduct
from ...verdict.measure import MeasureValue
from .records import TokenSideRecord

if TYPE_CHECKING:
    from ...suites import Prompt


@dataclass(frozen=True)
class Measured:
    """One target's tokenization of one prompt (before any comparison)."""

    side: TokenSideRecord
    rendered_ids: bool
    """Whether the ids are the backend's (its tokenizer's special tokens, pieces and
    tokenize are then available for the comparison)."""


@dataclass
class TokenEvidence:
    """One item's evidence: ``labels`` are the reference's and the other target's; a side is
    None when a request it needed failed (:attr:`conduct` says which, with the server's
    message)."""

    prompt: Prompt
    labels: tuple[str, str]
    reference: Measured | None = None
    other: Measured | None = None
    reference_tokens: TokenSide | None = None
    """The reference's :class:`~...metrics.tokenization.TokenSide`, with what its tokenizer
    was asked where the two differ."""
    other_tokens: TokenSide | None = None
    allow: frozenset[str] = frozenset()
    """The tokenizer properties the check allows (``normalization``, ``control-tokens``)."""
    conduct: Conduct = field(default_factory=Conduct)

    @property
    def measures(self) -> dict[str, MeasureValue]:
        return {}

    def complete(self) -> bool:
        """Whether both sides were measured and asked what the comparison needs."""
        return None not in (self.reference, self.other, self.reference_tokens, self.other_tokens)
