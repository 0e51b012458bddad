"""llama-server's per-request ``lora`` scales reach every generation request of a backend
and nothing else: the HTTP client's ``post_fields`` (a scripted local server records what
was sent)."""

from __future__ import annotations

import asyncio

from pytest_infercheck.backends.http import HttpClient, HttpSettings
from pytest_infercheck.backends.llama_wire import LORA_PATHS

from .fake_server import Reply, Script, fake_server


def test_post_fields_reach_generation_paths_only_and_never_override() -> None:
    script = Script([Reply(body={"content": "1"})])
    lora = [{"id": 0, "scale": 1.0}, {"id": 1, "scale": 0.0}]
    with fake_server(script) as url:
        client = HttpClient("fake", HttpSettings(base_url=url, retries=0))
        client.post_fields = {"lora": lora}
        client.post_paths = LORA_PATHS

        async def run() -> None:
            await client.request("POST", "/completion", {"prompt": "1+1="})
            await client.request("POST", "/v1/chat/completions", {"messages": []})
            await client.request("POST", "/tokenize", {"content": "1"})
            await client.request("POST", "/completion", {"prompt": "x", "lora": []})
            await client.send_once("POST", "/completion", payload={"prompt": "y"})
            await client.aclose()

        asyncio.run(run())
    sent = [(r["path"], r["json"].get("lora")) for r in script.requests]
    assert sent == [
        ("/completion", lora),
        ("/v1/chat/completions", lora),
        ("/tokenize", None),  # not a generation: nothing added
        ("/completion", []),  # a request that sets its own lora keeps it (generate_base)
        ("/completion", lora),
    ]
