"""How an item's gathering went: what the framework's rules hold every kind to.

A kind's ``gather`` facet records, beside its measures, every request that failed, every path
it calls unsupported, every scenario it did not exercise and every reference it says is
cold (:class:`Conduct`). The rules (:func:`conduct_violations`) are the same for every kind:

- a request the target offers that fails (a 4xx refusal or a 5xx error, a broken body) fails
  the item with the server's message, on the reference side too (:class:`RequestFailure`);
  an answer whose engine counted fewer prompt tokens than were sent fails it as
  ``truncated``, naming both counts (the same record, its ``rule`` ``truncated``);
- ``unsupported`` comes only from the target's abilities probed at readiness
  (:meth:`Abilities.lacking`); one recorded any other way (from an error) fails the item;
- ``not exercised`` comes only from reasons decided before any request
  (:class:`NotExercised` made by :func:`not_exercised_before_requests`); one decided after a
  request fails the item;
- a reference said to be cold is shown cold (:class:`ColdReference`): its reported cached
  tokens are 0 where the engine reports them (or, sent first on an engine without an
  uncached request, fewer than on its prompt served whole: only a prefix it shares with
  other prompts), otherwise it was sent before anything that could warm the cache.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from .gate import Violation


@dataclass(frozen=True)
class RequestFailure:
    """A request the target offers that failed: ``side`` (``baseline q4@llama``, ``the
    reference``), what was asked (``chat-stream``, ``run 3``), the HTTP status (None: no
    response, a broken body, a crash) and the server's message."""

    side: str
    what: str
    message: str
    status: int | None = None
    rule: str = "request-failed"
    """The rule it fails under: ``request-failed``, or ``truncated`` for an answer whose
    engine counted fewer prompt tokens than were sent (:mod:`~pytest_infercheck.backends.
    prompt_count`), whose message names both counts."""

    def text(self) -> str:
        if self.rule != "request-failed":
            return f"{self.side}: {self.what}: {self.message}"
        status = f"HTTP {self.status}: " if self.status is not None else ""
        return f"{self.side}: {self.what} failed: {status}{self.message}"


@dataclass(frozen=True)
class Unsupported:
    """A path or feature the target does not offer, as its probed abilities say: ``ability``
    (``messages-endpoint``), what was not done because of it, and how that was known
    (``probed``: from the readiness probe; False: from anything else, which fails)."""

    ability: str
    what: str
    probed: bool
    evidence: str = ""
    """What the probe saw (``GET /v1/messages: 404``)."""

    def text(self) -> str:
        return f"{self.what}: unsupported ({self.ability} not offered: {self.evidence})"


@dataclass(frozen=True)
class Abilities:
    """What a target offers, probed at readiness: ``offered`` and ``lacking`` ability names,
    with what the probe saw of each lacking one. An ability in neither was not probed."""

    offered: frozenset[str] = frozenset()
    lacking: dict[str, str] = field(default_factory=dict)

    def offers(self, ability: str) -> bool:
        return ability in self.offered

    def unsupported(self, ability: str, what: str) -> Unsupported | None:
        """:class:`Unsupported` for ``what`` when the probe found ``ability`` lacking; None
        when it is offered or was not probed (then the request is made and judged)."""
        if ability not in self.lacking:
            return None
        return Unsupported(ability, what, probed=True, evidence=self.lacking[ability])


@dataclass(frozen=True)
class NotExercised:
    """A scenario or feature that was not exercised, with the reason, decided before any
    request (``decided_before_requests``); one decided after a request fails the item."""

    what: str
    reason: str
    decided_before_requests: bool

    def text(self) -> str:
        return f"{self.what}: not exercised ({self.reason})"


def not_exercised_before_requests(what: str, reason: str) -> NotExercised:
    """A :class:`NotExercised` decided from the matrix and probed abilities alone."""
    return NotExercised(what, reason, decided_before_requests=True)


ColdHow = Literal["uncached-request", "reported-zero", "sent-first"]


@dataclass(frozen=True)
class ColdReference:
    """A reference said to be cold, and how that was ensured: ``uncached-request`` (the
    engine's own request that reuses no cache: llama-server ``cache_prompt: false``, vLLM a
    unique ``cache_salt``, a fresh mlx-lm prompt cache), ``reported-zero`` (the engine
    reported its cached tokens), ``sent-first`` (sent before any request that could warm the
    cache for it). ``cached_tokens``: what the engine reported (None: it reports none);
    ``sent_first``: whether it was the first request of its prompt's family; ``whole``: the
    cached tokens the engine reports on the same prompt served whole (sent twice more after
    it, the second's count), where measured.

    An engine without an uncached request that reuses any prefix two prompts share
    (mlx_lm.server's prompt cache) reports cached tokens on a reference sent before anything
    of its own prompt: the chat template's opening, the words it shares with another prompt
    sent before it. No order of requests avoids that. Such a reference, sent first and
    reporting fewer cached tokens than the engine reports on its prompt served whole, is
    cold for its own prompt and says so; one reporting as many is a prompt the engine
    already held: not cold."""

    side: str
    how: ColdHow
    cached_tokens: int | None = None
    sent_first: bool = True
    whole: int | None = None

    @property
    def shared_prefix_only(self) -> bool:
        """Sent first, and the engine reused only part of its prompt (see the class
        docstring)."""
        return (
            self.sent_first
            and self.cached_tokens is not None
            and self.whole is not None
            and 0 < self.cached_tokens < self.whole
        )

    def describe(self) -> str:
        if self.how == "uncached-request":
            return f"{self.side} cold by an uncached request"
        if self.shared_prefix_only:
            return (
                f"{self.side} sent first, {self.cached_tokens} cached tokens reported, fewer "
                f"than the {self.whole} on its prompt served whole: only a prefix it shares "
                "with prompts sent before it (the engine has no uncached request)"
            )
        reported = (
            "no cached-token count reported"
            if self.cached_tokens is None
            else f"{self.cached_tokens} cached tokens reported"
        )
        order = "sent first" if self.sent_first else "sent after other requests"
        return f"{self.side} {order}, {reported}"

    def violation(self) -> str | None:
        if self.shared_prefix_only:
            return None
        if self.cached_tokens is not None and self.cached_tokens > 0:
            whole = (
                f", as many as on its prompt served whole ({self.whole})"
                if self.whole is not None
                else ""
            )
            return (
                f"{self.side} is not cold: the engine reports {self.cached_tokens} cached "
                f"prompt tokens on it{whole}"
            )
        if self.how != "uncached-request" and not self.sent_first and self.cached_tokens is None:
            return (
                f"{self.side} is not shown cold: it was sent after requests that could warm "
                "the cache, and the engine reports no cached-token count"
            )
        return None


@dataclass
class Conduct:
    """How an item's gathering went (see the module docstring)."""

    failures: list[RequestFailure] = field(default_factory=list)
    unsupported: list[Unsupported] = field(default_factory=list)
    not_exercised: list[NotExercised] = field(default_factory=list)
    cold: list[ColdReference] = field(default_factory=list)

    def merged(self, other: Conduct) -> Conduct:
        return Conduct(
            [*self.failures, *other.failures],
            [*self.unsupported, *other.unsupported],
            [*self.not_exercised, *other.not_exercised],
            [*self.cold, *other.cold],
        )


def conduct_violations(conduct: Conduct) -> list[Violation]:
    """The violations of the framework's rules on ``conduct`` (see the module docstring)."""
    out = [Violation(f.text(), f.rule) for f in conduct.failures]
    out += [
        Violation(
            f"{u.what}: recorded unsupported without a probe of {u.ability!r}: a refusal or "
            "an error of a path the target was not shown to lack fails",
            "unsupported-unprobed",
        )
        for u in conduct.unsupported
        if not u.probed
    ]
    out += [
        Violation(
            f"{n.what}: recorded not exercised after a request ({n.reason}): only reasons "
            "known before any request may leave a scenario out",
            "not-exercised-late",
        )
        for n in conduct.not_exercised
        if not n.decided_before_requests
    ]
    out += [Violation(v, "reference-not-cold") for c in conduct.cold if (v := c.violation())]
    return out


def conduct_notes(conduct: Conduct) -> list[str]:
    """What an item says of its conduct beside its violations: unsupported and not
    exercised parts, and how each cold reference was ensured."""
    return [
        *(u.text() for u in conduct.unsupported if u.probed),
        *(n.text() for n in conduct.not_exercised if n.decided_before_requests),
        *(c.describe() for c in conduct.cold),
    ]


def all_failures(conducts: Iterable[Conduct]) -> list[RequestFailure]:
    return [f for c in conducts for f in c.failures]
