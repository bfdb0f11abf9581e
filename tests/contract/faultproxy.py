"""A small HTTP proxy in front of the moto server that breaks chosen requests on purpose.

The store under test talks to the proxy exactly as it would to S3 (real aiobotocore requests,
real sockets), so faults exercise the whole path: botocore parsing, the error edge in
``rlcd/storage/s3.py`` and the retry loop. Each injected fault applies to the next ``times``
requests that match a method and a substring of the path and query.
"""

from __future__ import annotations

import enum
import http.client
import socket
import struct
import threading
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class Fault(enum.Enum):
    SLOW_DOWN = (503, "SlowDown", "Please reduce your request rate.")
    INTERNAL = (500, "InternalError", "We encountered an internal error. Please try again.")
    CONFLICT = (409, "ConditionalRequestConflict", "A conflicting conditional operation.")
    FORBIDDEN = (403, "AccessDenied", "Access Denied")
    RESET = "reset"
    """Drop the connection with a TCP RST before answering."""
    HANG = "hang"
    """Answer nothing until long after any sane read timeout."""
    LOSE_RESPONSE = "lose-response"
    """Forward the request (it takes effect), then reset instead of relaying the answer."""
    TRUNCATE = "truncate"
    """Forward, relay the headers and half the body, then reset."""
    IGNORE_RANGE = "ignore-range"
    """Forward without the ``Range`` header, and relay the whole object (a 200), as a store
    that ignores ranges would."""
    HOLD = "hold"
    """Keep the request until :meth:`FaultProxy.release`, then forward it as it was (a lost
    race: the test commits a winner while a writer's commit put waits)."""


_HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect"}


@dataclass
class _Rule:
    fault: Fault
    remaining: int | None
    method: str | None
    contains: str | None

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (
            self.contains is None or self.contains in path
        )


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: object, client_address: object) -> None:
        """Stay quiet: clients that time out or are reset leave broken pipes behind."""


@dataclass(frozen=True)
class Seen:
    """One request as the proxy received it: its headers (names in lower case) and the CRC32
    and length of its body."""

    method: str
    path: str
    headers: dict[str, str]
    body_crc32: int
    body_length: int


class FaultProxy:
    """Forwards to ``upstream``; records every request as ``(method, path)``, and in ``seen``
    with its headers and body checksum."""

    def __init__(self, upstream: str, *, hang_s: float = 10.0) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._hang_s = hang_s
        self._rules: list[_Rule] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._holding = threading.Event()
        self._released = threading.Event()
        self.requests: list[tuple[str, str]] = []
        self.seen: list[Seen] = []
        self._server = _Server(("127.0.0.1", 0), self._handler_class())

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def inject(
        self,
        fault: Fault,
        *,
        times: int | None = 1,
        method: str | None = None,
        contains: str | None = None,
    ) -> None:
        """Break the next ``times`` matching requests (every one when ``times`` is None)."""
        if fault is Fault.HOLD:
            self._holding.clear()
            self._released.clear()
        with self._lock:
            self._rules.append(_Rule(fault, times, method, contains))

    def wait_held(self, timeout_s: float) -> bool:
        """Wait until a request matching a :attr:`Fault.HOLD` rule arrived; False on timeout."""
        return self._holding.wait(timeout_s)

    def release(self) -> None:
        """Forward the held requests (and any later ones a hold rule matches)."""
        self._released.set()

    def reset(self) -> None:
        """Forget every rule and recorded request."""
        with self._lock:
            self._rules.clear()
            self.requests.clear()
            self.seen.clear()

    def count(self, method: str, contains: str = "") -> int:
        """How many requests with this method and path substring reached the proxy."""
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and contains in p)

    @contextmanager
    def running(self) -> Iterator[FaultProxy]:
        thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self._stopping.set()
            self._released.set()
            self._server.shutdown()
            self._server.server_close()
            thread.join()

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.requests.append((method, path))
            for rule in self._rules:
                if rule.remaining != 0 and rule.matches(method, path):
                    if rule.remaining is not None:
                        rule.remaining -= 1
                    return rule.fault
        return None

    def _forward(
        self, method: str, path: str, headers: list[tuple[str, str]], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self._upstream, timeout=30)
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers:
                if name.lower() not in _HOP_BY_HOP:
                    conn.putheader(name, value)
            conn.endheaders(body or None)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive and 100-continue, as S3 speaks

            def log_message(self, _format: str, *_args: object) -> None:
                pass

            def handle_one_request(self) -> None:
                self.raw_requestline = self.rfile.readline(65537)
                if not self.raw_requestline or not self.parse_request():
                    self.close_connection = True
                    return
                if "chunked" in self.headers.get("Transfer-Encoding", ""):
                    raise AssertionError("the proxy does not relay chunked request bodies")
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                headers = {name.lower(): value for name, value in self.headers.items()}
                seen = Seen(self.command, self.path, headers, zlib.crc32(body), len(body))
                with proxy._lock:
                    proxy.seen.append(seen)
                fault = proxy._take(self.command, self.path)
                if fault is Fault.HOLD:
                    proxy._holding.set()
                    proxy._released.wait()
                if fault is Fault.RESET:
                    self._reset()
                elif fault is Fault.HANG:
                    proxy._stopping.wait(proxy._hang_s)
                    self.close_connection = True
                elif isinstance(fault, Fault) and isinstance(fault.value, tuple):
                    self._error(*fault.value)
                else:
                    sent = list(self.headers.items())
                    if fault is Fault.IGNORE_RANGE:
                        sent = [(n, v) for n, v in sent if n.lower() != "range"]
                    status, headers, payload = proxy._forward(self.command, self.path, sent, body)
                    if fault is Fault.LOSE_RESPONSE:
                        self._reset()
                    elif fault is Fault.TRUNCATE:
                        self._relay(status, headers, payload, cut=len(payload) // 2)
                        self._reset()
                    else:
                        self._relay(status, headers, payload)

            def _reset(self) -> None:
                linger = struct.pack("ii", 1, 0)  # close with RST, not FIN
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, linger)
                self.connection.close()
                self.close_connection = True

            def _error(self, status: int, code: str, message: str) -> None:
                body = (
                    f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                    f"<Message>{message}</Message><RequestId>fault</RequestId></Error>"
                ).encode()
                self.send_response_only(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def _relay(
                self,
                status: int,
                headers: list[tuple[str, str]],
                payload: bytes,
                cut: int | None = None,
            ) -> None:
                self.send_response_only(status)
                for name, value in headers:
                    if name.lower() not in _HOP_BY_HOP and name.lower() != "content-length":
                        self.send_header(name, value)
                length = {k.lower(): v for k, v in headers}.get("content-length")
                if self.command == "HEAD" and length is not None:
                    self.send_header("Content-Length", length)
                elif status != 204:
                    self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload[:cut])

        return Handler
