"""Renders ahead of items (``GenerationCache.render_many``) and the HTTP client's TLS setup.

Renders ahead must be the renders an item would make (cached under the same key, so the
item asks the backend nothing), concurrent up to the backend's bound, and must not cache a
failure: the item that needs a failed render renders it again and fails with the error."""

from __future__ import annotations

import asyncio

import pytest

from pytest_infercheck.backends import BackendError, PromptInput
from pytest_infercheck.backends.http import HttpClient, HttpSettings
from pytest_infercheck.generation_cache import GenerationCache, ResolvedTarget
from pytest_infercheck.suites import Prompt

from .comparison_fakes import FakeBackend, generation
from .factories import suite_prompt


class RenderingServer(FakeBackend):
    """Renders ``text`` to ``<s>text`` after a short wait, counting calls and the most renders
    in flight at once; a prompt in ``broken`` fails once."""

    def __init__(self, concurrency: int, broken: set[str] | None = None) -> None:
        super().__init__("srv", generation("x", [5]))
        self.concurrency = concurrency
        self.broken = set(broken or ())
        self.calls: list[str] = []
        self.in_flight = self.max_in_flight = 0

    async def render(self, user_text: str, system: str | None, thinking: bool) -> PromptInput:
        self.calls.append(user_text)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.01)
            if user_text in self.broken:
                self.broken.discard(user_text)
                raise BackendError(f"backend 'srv': render of {user_text!r} failed")
            return PromptInput(f"<s>{user_text}", (1, len(user_text)), templated=False)
        finally:
            self.in_flight -= 1


def prompt(n: int) -> Prompt:
    return suite_prompt(f"p{n}", f"prompt {n}")


def test_renders_ahead_are_the_items_renders_made_concurrently() -> None:
    server = RenderingServer(concurrency=4)
    target = ResolvedTarget("m@srv", ("m", "srv"), server)
    cache = GenerationCache()
    try:
        prompts = [prompt(n) for n in range(6)]
        cache.render_many(target, [*prompts, prompts[0]], thinking=False)
        assert sorted(server.calls) == sorted(p.text for p in prompts)  # each once
        assert server.max_in_flight == 6  # the fake has no gate: all at once
        for p in prompts:  # the item's render is the cached one: no further call
            rendered = cache.render(target, p, thinking=False)
            assert rendered == PromptInput(f"<s>{p.text}", (1, len(p.text)), templated=False)
        assert len(server.calls) == 6
        cache.render_many(target, prompts, thinking=False)  # nothing left to render
        assert len(server.calls) == 6
        cache.render_many(target, prompts[:1], thinking=True)  # another key: rendered
        assert len(server.calls) == 7
    finally:
        cache.close()


def test_a_failed_render_ahead_fails_its_item_without_asking_again() -> None:
    """A server that refuses a render once and answers the second time has refused: the item
    fails with the first error (it used to ask again and pass on the second answer)."""
    server = RenderingServer(concurrency=4, broken={"prompt 1"})
    target = ResolvedTarget("m@srv", ("m", "srv"), server)
    cache = GenerationCache()
    try:
        cache.render_many(target, [prompt(0), prompt(1)], thinking=False)
        with pytest.raises(BackendError):
            cache.render(target, prompt(1), thinking=False)
        assert server.calls.count("prompt 1") == 1  # never asked again
        assert cache.render(target, prompt(0), thinking=False).text == "<s>prompt 0"
    finally:
        cache.close()


def test_an_in_process_backend_renders_item_by_item() -> None:
    server = RenderingServer(concurrency=1)
    target = ResolvedTarget("m@local", ("m", "local"), server)
    cache = GenerationCache()
    try:
        cache.render_many(target, [prompt(0), prompt(1)], thinking=False)
        assert server.calls == []
    finally:
        cache.close()


@pytest.mark.parametrize(
    ("url", "verifies"),
    [
        ("http://127.0.0.1:8080", False),
        ("HTTP://127.0.0.1:8080", False),
        ("https://api.example.com/v1", True),
    ],
)
def test_tls_verification_is_kept_for_https(url: str, verifies: bool) -> None:
    """A plain-HTTP base URL skips loading the CA bundle (the client follows no redirects);
    an HTTPS one verifies certificates."""
    client = HttpClient("srv", HttpSettings(base_url=url))

    async def built() -> bool:
        httpx_client, _ = client._client()
        transport = httpx_client._transport
        context = transport._pool._ssl_context  # type: ignore[attr-defined]
        await client.aclose()
        return bool(context.check_hostname)

    assert asyncio.run(built()) is verifies
