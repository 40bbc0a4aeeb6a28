"""A fake Gemini API on loopback for tests: the real google-genai client talks to it.

It speaks ``POST /v1beta/models/{model}:generateContent`` and answers from a
script of replies, one per request, recording every request it got::

    with FakeGemini() as fake:
        fake.script(error(429, retry_delay=0.01), ok("hello", input_tokens=7, output_tokens=3))
        engine = GeminiEngine(api_key="test", base_url=fake.base_url)

When the script is empty, a ``router`` (``fake.route(fn)``, ``fn(seen) -> Reply | None``)
answers; :func:`fields` writes a DSPy ChatAdapter answer and :attr:`Seen.asked`
names the output field a DSPy prompt asks for first, so a router can answer
each sub-agent by what it asks::

    fake.route(lambda seen: fields(plan=PLAN) if seen.asked == "plan" else None)
"""

from __future__ import annotations

import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

_PATH = re.compile(r"^/(v1beta|v1)/models/(?P<model>[^/:]+):generateContent$")
_STATUS_NAMES = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL", 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}


@dataclass(frozen=True)
class Reply:
    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    delay_s: float = 0.0


@dataclass
class Seen:
    """One request the fake received."""

    model: str
    api_key: str | None
    body: dict[str, Any]

    @property
    def text(self) -> str:
        return "\n".join(p.get("text", "") for c in self.body.get("contents", []) for p in c.get("parts", []))

    @property
    def generation_config(self) -> dict[str, Any]:
        return self.body.get("generationConfig", {})

    @property
    def system(self) -> str:
        return "\n".join(p.get("text", "") for p in (self.body.get("systemInstruction") or {}).get("parts", []))

    @property
    def prompt(self) -> str:
        """Everything the model was shown: the system instruction and the contents."""
        return f"{self.system}\n{self.text}"

    @property
    def asked(self) -> str | None:
        """The output field a DSPy ChatAdapter prompt asks for first (``plan``, ``code``, ``fixed_code`` ...)."""
        found = re.findall(r"starting with the field `\[\[ ## (\w+) ## \]\]`", self.text)
        return found[-1] if found else None


def ok(text: str, *, input_tokens: int = 10, output_tokens: int = 5, thoughts: int = 0, thought_text: str | None = None,
       finish: str = "STOP", model_version: str = "gemini-fake-001") -> Reply:
    parts = ([{"text": thought_text, "thought": True}] if thought_text else []) + [{"text": text}]
    usage = {"promptTokenCount": input_tokens, "candidatesTokenCount": output_tokens,
             "totalTokenCount": input_tokens + output_tokens + thoughts}
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish, "index": 0}],
            "usageMetadata": usage, "modelVersion": model_version, "responseId": "fake-response"}
    return Reply(200, json.dumps(body).encode())


def error(code: int, message: str = "scripted failure", *, retry_delay: float | None = None,
          retry_after: float | None = None) -> Reply:
    err: dict[str, Any] = {"code": code, "message": message, "status": _STATUS_NAMES.get(code, "UNKNOWN")}
    if retry_delay is not None:
        err["details"] = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": f"{retry_delay}s"}]
    headers = (("Retry-After", str(retry_after)),) if retry_after is not None else ()
    return Reply(code, json.dumps({"error": err}).encode(), headers)


def fields(*, input_tokens: int = 10, output_tokens: int = 5, **values: Any) -> Reply:
    """A DSPy ChatAdapter answer: ``[[ ## name ## ]]`` then the value (JSON for anything but a string) per field."""
    parts = [f"[[ ## {k} ## ]]\n{v if isinstance(v, str) else json.dumps(v)}" for k, v in values.items()]
    return ok("\n\n".join(parts + ["[[ ## completed ## ]]"]), input_tokens=input_tokens, output_tokens=output_tokens)


class Agents:
    """A router (``FakeGemini.route``) answering each sub-agent from its own queue, by the output field it asks for
    (``plan``, ``code``, ``fixed_code``, ``analysis`` ...); the last answer of a queue repeats."""

    def __init__(self, **queues: list[dict[str, Any]]):
        self.queues = {k: list(v) for k, v in queues.items()}

    def __call__(self, seen: "Seen") -> Reply | None:
        queue = self.queues.get(seen.asked)
        if not queue:
            return None
        return fields(**(queue.pop(0) if len(queue) > 1 else queue[0]))


def malformed() -> Reply:
    return Reply(200, b'{"candidates": [{"content": ')


def slow(seconds: float, reply: Reply | None = None) -> Reply:
    r = reply or ok("too late")
    return Reply(r.status, r.body, r.headers, delay_s=seconds)


@dataclass
class FakeGemini:
    """The server. ``base_url`` is ready after ``start()`` (or ``with``)."""

    replies: list[Reply] = field(default_factory=list)
    seen: list[Seen] = field(default_factory=list)
    router: Callable[[Seen], Reply | None] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def script(self, *replies: Reply) -> "FakeGemini":
        with self._lock:
            self.replies.extend(replies)
        return self

    def route(self, router: Callable[[Seen], Reply | None]) -> "FakeGemini":
        """Answer requests the script does not cover with ``router(seen)`` (None: the usual 500)."""
        self.router = router
        return self

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("start the fake server first")
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> "FakeGemini":
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                match = _PATH.match(self.path.split("?")[0])
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                if match is None:
                    self._send(Reply(404, json.dumps({"error": {"code": 404, "message": self.path}}).encode()))
                    return
                with fake._lock:
                    seen = Seen(match["model"], self.headers.get("x-goog-api-key"), json.loads(raw or b"{}"))
                    fake.seen.append(seen)
                    reply = fake.replies.pop(0) if fake.replies else None
                    if reply is None and fake.router is not None:
                        reply = fake.router(seen)
                    if reply is None:
                        reply = error(500, "fake gemini: no scripted reply left")
                if reply.delay_s and fake._stop.wait(reply.delay_s):
                    return
                self._send(reply)

            def _send(self, reply: Reply) -> None:
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(reply.body)))
                    for k, v in reply.headers:
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-gemini", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "FakeGemini":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
