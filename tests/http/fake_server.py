"""A scripted local HTTP server for faults real servers won't produce on demand."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    raw: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


@dataclass
class Script:
    """Replies served in order (the last one repeats); requests are recorded."""

    replies: list[Reply]
    requests: list[dict[str, Any]] = field(default_factory=list)
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def next(self) -> Reply:
        return self.replies.pop(0) if len(self.replies) > 1 else self.replies[0]


@contextmanager
def fake_server(script: Script) -> Iterator[str]:
    """Serve ``script`` on a free loopback port; yields the base URL."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            payload = json.loads(self.rfile.read(length) or b"null")
            script.requests.append(
                {"path": self.path, "json": payload, "auth": self.headers.get("authorization")}
            )
            with script.lock:
                reply = script.next()
                script.in_flight += 1
                script.max_in_flight = max(script.max_in_flight, script.in_flight)
            time.sleep(reply.delay_s)
            with script.lock:
                script.in_flight -= 1
            data = reply.raw if reply.raw is not None else json.dumps(reply.body).encode()
            try:
                self.send_response(reply.status)
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        do_GET = do_POST

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def chat_answer(text: str, tokens: list[tuple[str, float]] | None = None) -> dict[str, Any]:
    """A chat completion in the current OpenAI shape, with logprobs when ``tokens`` given."""
    choice: dict[str, Any] = {
        "index": 0,
        "message": {"role": "assistant", "content": text},
        "finish_reason": "stop",
    }
    if tokens is not None:
        choice["logprobs"] = {
            "content": [
                {"token": t, "logprob": lp, "top_logprobs": [{"token": t, "logprob": lp}]}
                for t, lp in tokens
            ]
        }
    return {"choices": [choice]}
