"""HTTP/1.1 for S3's data requests (the GET of a source, the UploadPart of a part), each
response body received straight into one buffer.

aiohttp receives a response in ``recv`` calls into fresh bytes objects, feeds them through its
parser into a queue and joins them at the end: every byte is copied twice in user space, into
memory that is new each time (its pages faulted in and cleared by the kernel). Here a body of
known length is received into one ``bytearray`` of that length (asyncio's
:class:`~asyncio.BufferedProtocol`: the kernel's copy is the only one), and the request's body
pieces are handed to the socket as they are, which saves the event-loop thread CPU.

Only what those requests need, and nothing a caller could mistake for more: one request at a
time per connection, connections kept alive (up to ``idle_s``) and reused, bodies framed by
``Content-Length``, chunked or by the end of the connection (said so: such a body cannot be
told whole), TLS by the caller's SSL context. A connection whose exchange left anything in
doubt (an answer before the request body was all sent, data after the response, anything to
read while idle) is closed.
No proxies, redirects or ``Expect: 100-continue``: a caller that needs them (see
:mod:`rlcd.storage.s3`) sends that request through botocore. Failures are :class:`OSError`\\ s:
:class:`TimeoutError` (connect or read), :class:`HttpError` (a connection closed or broken
mid-exchange, a response that is not HTTP/1.1), or the socket's and SSL's own.
"""

from __future__ import annotations

import asyncio
import re
import select
import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Self
from urllib.parse import urlsplit

__all__ = ("HttpError", "HttpPool", "Origin", "Response", "Body")

Body = Sequence[bytes | bytearray | memoryview]
"""A request body: pieces sent one after another, never joined."""

MAX_HEAD_BYTES: Final = 64 * 1024
"""The most a response's status line and headers may take (S3's take well under 2 KiB)."""
_SCRATCH_BYTES: Final = 64 * 1024
_SEND_SLICE: Final = 256 * 1024
"""The most of a body handed to the transport at once: what the socket does not take at once,
asyncio copies into its buffer, so a large piece goes in slices, each after the last drained."""


_DIGITS: Final = re.compile(r"[0-9]{1,18}")
_STATUS: Final = re.compile(r"[0-9]{3}")
_HEX: Final = re.compile(r"[0-9A-Fa-f]{1,15}")
_SIZE_LINE: Final = -1  # chunked framing: what comes next, when not chunk data
_CRLF: Final = -2
_TRAILERS: Final = -3


class HttpError(ConnectionError):
    """The exchange broke: the connection closed or failed before the response was whole, or
    the response is not well-formed HTTP/1.1."""


@dataclass(frozen=True, slots=True)
class Origin:
    """Where requests go: ``scheme://host[:port]``."""

    scheme: str
    host: str
    port: int
    netloc: str  # as written in the URL: the Host header

    @classmethod
    def of(cls, url: str) -> Origin:
        parts = urlsplit(url)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError(f"not an http(s) origin: {url!r}")
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return cls(parts.scheme, parts.hostname, port, parts.netloc)


@dataclass(frozen=True, slots=True)
class Response:
    """A whole response: its status, its headers (names in lower case, repeated ones joined
    with ``, ``) and its body. ``until_close``: the body had neither a length nor chunks, so
    it ended where the connection did, and nothing tells a whole body from a cut one."""

    status: int
    headers: dict[str, str]
    body: bytearray
    until_close: bool = False


class _Exchange(asyncio.BufferedProtocol):
    """One connection, and the response it is receiving. A response is parsed as it arrives:
    the head into a bounded scratch buffer, then the body (into its own buffer when its length
    is known)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, read_timeout: float) -> None:
        self._loop = loop
        self._timeout = read_timeout
        self._scratch = bytearray(_SCRATCH_BYTES)
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._drained: asyncio.Future[None] | None = None
        self._reset(None)

    def _reset(self, done: asyncio.Future[Response] | None) -> None:
        """Ready for the next response (``done`` receives it)."""
        self._done = done
        self._head = bytearray()
        self._status = 0
        self._headers: dict[str, str] = {}
        self._framing = ""  # "" while the head arrives, then "length", "chunked" or "close"
        self._body = bytearray()
        self._filled = 0  # bytes of _body received ("length")
        self._pending = bytearray()  # chunked framing not yet parsed
        self._chunk_left = _SIZE_LINE  # bytes left of the current chunk, or what comes next
        self.received = 0  # bytes of this response so far
        self.reusable = False
        self._deadline = 0.0
        self._timer: asyncio.TimerHandle | None = None

    # --- the caller's side ---------------------------------------------------------------

    async def exchange(self, head: bytes, body: Body) -> Response:
        """Send one request and receive its response."""
        done: asyncio.Future[Response] = self._loop.create_future()
        self._reset(done)
        transport = self.transport
        if transport is None or self.closed or transport.is_closing():
            raise HttpError("connection closed")
        self._arm()
        try:
            transport.write(head)
            for piece in body:
                view = memoryview(piece).cast("B")
                for start in range(0, len(view), _SEND_SLICE):
                    if self._drained is not None:  # the socket's buffer is full: wait
                        await asyncio.wait(
                            (self._drained, done), return_when=asyncio.FIRST_COMPLETED
                        )
                    if done.done():  # answered (or failed) before the body was all sent:
                        self.reusable = False  # the server may still expect the rest
                        return await done
                    transport.write(view[start : start + _SEND_SLICE])
            response = await done
            if transport.get_write_buffer_size():  # answered before the body was all sent
                self.reusable = False
            return response
        finally:
            if not done.done():  # cancelled: the connection is aborted, nobody awaits this
                done.cancel()
            self._done = None
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None

    def idle_fit(self) -> bool:
        """Whether this kept-alive connection may carry another request: open, and nothing to
        read on it. Bytes a server sent past its response (or its close) are still in the
        socket until the event loop reads them, and would be taken for the next response."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            return False
        sock = transport.get_extra_info("socket")
        if sock is None:
            return False
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    # --- the read timeout: no progress for read_timeout seconds ---------------------------

    def _arm(self) -> None:
        self._deadline = self._loop.time() + self._timeout
        self._timer = self._loop.call_at(self._deadline, self._check_deadline)

    def _check_deadline(self) -> None:
        if self._done is None or self._done.done():
            return
        if self._loop.time() < self._deadline:  # progress since: wait for the rest
            self._timer = self._loop.call_at(self._deadline, self._check_deadline)
            return
        self._fail(TimeoutError(f"no response data for {self._timeout:g} s"))

    # --- asyncio's side ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def pause_writing(self) -> None:
        if self._drained is None:
            self._drained = self._loop.create_future()

    def resume_writing(self) -> None:
        self._deadline = self._loop.time() + self._timeout
        if self._drained is not None:
            self._drained.set_result(None)
            self._drained = None

    def get_buffer(self, _sizehint: int) -> memoryview:
        if self._framing == "length":
            return memoryview(self._body)[self._filled :]
        return memoryview(self._scratch)

    def buffer_updated(self, nbytes: int) -> None:
        self._deadline = self._loop.time() + self._timeout
        self.received += nbytes
        if self._done is None or self._done.done():
            # bytes nobody asked for (the connection is not idle as it should be): unusable
            self._fail(HttpError("data received outside a response"))
            return
        try:
            if self._framing == "length":
                self._filled += nbytes
                if self._filled == len(self._body):
                    self._finish()
            else:
                self._take(memoryview(self._scratch)[:nbytes])
        except HttpError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self.closed = True
        if self._framing == "close" and self._done is not None and not self._done.done():
            self._finish()
        return False  # close the transport: connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        if self._done is None or self._done.done():
            return
        if self._framing == "close" and exc is None:
            self._finish()
            return
        state = "before the response" if not self.received else "before the response was whole"
        error = HttpError(f"connection closed {state} ({self.received} bytes received)")
        if exc is not None:
            error.__cause__ = exc
        self._done.set_exception(error)

    # --- parsing ---------------------------------------------------------------------------

    def _take(self, data: memoryview | bytes) -> None:
        if not self._framing:
            self._head += data
            while not self._framing:  # an interim (1xx) response is followed by the real one
                end = self._head.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._head) > MAX_HEAD_BYTES:
                        raise HttpError(f"response head over {MAX_HEAD_BYTES} bytes")
                    return
                head, self._head = bytes(self._head[:end]), self._head[end + 4 :]
                self._start(head)
            rest, self._head = bytes(self._head), bytearray()
            if self._framing == "length":
                if len(rest) > len(self._body):
                    raise HttpError("more response data than its Content-Length")
                self._body[: len(rest)] = rest
                self._filled = len(rest)
                if self._filled == len(self._body):
                    self._finish()
                return
            data = rest
        if self._framing == "close":
            self._body += data
        elif self._framing == "chunked":
            self._pending += data
            self._unchunk()

    def _start(self, head: bytes) -> None:
        """Parse the status line and headers; choose the body's framing."""
        lines = head.decode("latin-1").split("\r\n")
        version, _, rest = lines[0].partition(" ")
        code = rest.partition(" ")[0]
        if version not in {"HTTP/1.1", "HTTP/1.0"} or not _STATUS.fullmatch(code):
            raise HttpError(f"not an HTTP/1.1 response: {lines[0][:80]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise HttpError(f"malformed response header: {line[:80]!r}")
            name, value = name.lower(), value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        status = int(code)
        if status == 101:
            raise HttpError("a protocol switch nobody asked for")
        if 100 <= status < 200:
            return  # _framing stays "": the next head is parsed
        self._status, self._headers = status, headers
        connection = headers.get("connection", "").lower()
        keep = "close" not in connection and (version == "HTTP/1.1" or "keep-alive" in connection)
        codings = headers.get("transfer-encoding", "").lower()
        if status in {204, 304}:  # never a body
            self._framing = "length"
            self.reusable = keep
        elif codings:  # chunked last, or else the body ends with the connection
            chunked = codings.rsplit(",", 1)[-1].strip() == "chunked"
            self._framing = "chunked" if chunked else "close"
            self.reusable = keep and chunked
        elif "content-length" in headers:
            length = headers["content-length"]
            if not _DIGITS.fullmatch(length):
                raise HttpError(f"bad Content-Length: {length[:40]!r}")
            self._framing = "length"
            self._body = bytearray(int(length))
            self.reusable = keep
        else:
            self._framing = "close"

    def _unchunk(self) -> None:
        """Move what ``_pending`` holds of chunked framing into the body."""
        pending, at = self._pending, 0
        while True:
            if self._chunk_left > 0:  # chunk data
                take = min(self._chunk_left, len(pending) - at)
                if not take:
                    break
                self._body += pending[at : at + take]
                at += take
                self._chunk_left -= take
                if not self._chunk_left:
                    self._chunk_left = _CRLF
                continue
            if self._chunk_left == _CRLF:
                if len(pending) - at < 2:
                    break
                if pending[at : at + 2] != b"\r\n":
                    raise HttpError("chunk data not followed by CRLF")
                at += 2
                self._chunk_left = _SIZE_LINE
                continue
            end = pending.find(b"\r\n", at)  # a size line, or a trailer line
            if end < 0:
                if len(pending) - at > MAX_HEAD_BYTES:
                    raise HttpError("chunk size or trailer line too long")
                break
            line, at = bytes(pending[at:end]), end + 2
            if self._chunk_left == _TRAILERS:
                if not line:  # the empty line after the trailers: the body is whole
                    if at < len(pending):
                        raise HttpError("data after the last chunk")
                    self._finish()
                    return
                continue
            digits = line.split(b";", 1)[0].strip().decode("latin-1")
            if not _HEX.fullmatch(digits):
                raise HttpError(f"bad chunk size line {line[:20]!r}")
            size = int(digits, 16)
            self._chunk_left = size if size else _TRAILERS
        self._pending = pending[at:]

    def _finish(self) -> None:
        response = Response(self._status, self._headers, self._body, self._framing == "close")
        self._framing = "done"  # anything more is data outside a response
        self._body, self._headers, self._pending = bytearray(), {}, bytearray()
        if self._done is not None and not self._done.done():
            self._done.set_result(response)

    def _fail(self, exc: BaseException) -> None:
        self.abort()
        if self._done is not None and not self._done.done():
            self._done.set_exception(exc)


class HttpPool:
    """Connections to any number of origins, kept alive between requests.

    At most ``limit`` requests are in flight at once (more wait their turn), and at most
    ``limit`` connections are kept idle (for up to ``idle_s`` each): at most ``2 * limit`` are
    ever open. ``ssl_context`` makes the TLS connections (required for ``https`` origins).
    Each request's connect (TCP and TLS) must finish within ``connect_timeout``; a response must
    make progress at least every ``read_timeout``.
    """

    def __init__(
        self,
        *,
        limit: int,
        connect_timeout: float,
        read_timeout: float,
        ssl_context: ssl.SSLContext | None = None,
        idle_s: float = 15.0,
    ) -> None:
        self._limit = limit
        self._slots = asyncio.Semaphore(limit)
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._ssl = ssl_context
        self._idle_s = idle_s
        self._idle: list[tuple[float, Origin, _Exchange]] = []  # oldest first
        self._closed = False

    @property
    def tls(self) -> bool:
        """Whether it can reach ``https`` origins."""
        return self._ssl is not None

    async def request(
        self,
        origin: Origin,
        method: str,
        target: str,
        headers: Mapping[str, str],
        body: Body = (),
    ) -> Response:
        """Send ``method target`` with ``headers`` (which must name the host) and ``body``
        (a ``Content-Length`` is added), and return the whole response. A kept-alive connection
        that turns out closed before any of the response arrived is replaced once by a new one
        (the request is sent again: only for requests that may be repeated)."""
        length = sum(len(memoryview(piece).cast("B")) for piece in body)
        lines = [f"{method} {target} HTTP/1.1"]
        lines += (f"{name}: {value}" for name, value in headers.items())
        lines.append(f"content-length: {length}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        async with self._slots:
            while True:
                conn, reused = await self._connection(origin)
                try:
                    response = await conn.exchange(head, body)
                except HttpError:
                    conn.abort()
                    if reused and not conn.received:
                        continue  # the server had closed it while idle: once more, anew
                    raise
                except BaseException:
                    conn.abort()
                    raise
                if conn.reusable and not conn.closed and not self._closed:
                    self._keep(origin, conn)
                else:
                    conn.abort()
                return response

    async def _connection(self, origin: Origin) -> tuple[_Exchange, bool]:
        """An idle connection to ``origin`` (the most recent), or a new one."""
        if self._closed:
            raise HttpError("the connection pool is closed")
        loop = asyncio.get_running_loop()
        self._prune(loop.time())
        for i in range(len(self._idle) - 1, -1, -1):
            if self._idle[i][1] == origin:
                conn = self._idle.pop(i)[2]
                if conn.idle_fit():
                    return conn, True
                conn.abort()
        tls = origin.scheme == "https"
        if tls and self._ssl is None:
            raise ValueError(f"{origin.netloc}: an https origin needs an SSL context")
        async with asyncio.timeout(self._connect_timeout):
            _, conn = await loop.create_connection(
                lambda: _Exchange(loop, self._read_timeout),
                origin.host,
                origin.port,
                ssl=self._ssl if tls else None,
                server_hostname=origin.host if tls else None,
            )
        return conn, False

    def _keep(self, origin: Origin, conn: _Exchange) -> None:
        now = asyncio.get_running_loop().time()
        self._idle.append((now, origin, conn))
        self._prune(now)

    def _prune(self, now: float) -> None:
        """Close the idle connections that expired, that the server closed, and the oldest
        beyond ``limit``."""
        live = []
        for entry in self._idle:
            if now - entry[0] < self._idle_s and not entry[2].closed:
                live.append(entry)
            else:
                entry[2].abort()
        for _, _, conn in live[: -self._limit]:
            conn.abort()
        self._idle = live[-self._limit :]

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the idle connections; a request in flight closes its own when it ends."""
        self._closed = True
        for _, _, conn in self._idle:
            conn.abort()
        self._idle.clear()
