"""The HTTP/1.1 client of S3's data requests, against a scripted server on 127.0.0.1: framing
(length, chunked, until close), keep-alive and its stale connections, timeouts, broken and
malformed responses, request bodies under flow control, cancellation, TLS."""

from __future__ import annotations

import asyncio
import datetime
import gc
import ipaddress
import ssl
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from rlcd.storage._http1 import MAX_HEAD_BYTES, HttpError, HttpPool, Origin, Response

pytestmark = pytest.mark.anyio

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
OK = b"HTTP/1.1 200 OK\r\n"


class Server:
    """A server whose every request is answered by ``handler``; counts connections and
    requests."""

    def __init__(self, handler: Handler, *, read_body: bool = True) -> None:
        self.handler = handler
        self.read_body = read_body  # False: answer once the head is in
        self.connections = 0
        self.requests: list[tuple[bytes, bytes]] = []  # (head, body)
        self.port = 0
        self.tasks: set[asyncio.Task[None]] = set()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                body = await reader.readexactly(length) if self.read_body else b""
                self.requests.append((head, body))
                await self.handler(reader, writer)
                if writer.is_closing():
                    return
        finally:
            writer.close()


@asynccontextmanager
async def serving(
    handler: Handler, tls: ssl.SSLContext | None = None, *, read_body: bool = True
) -> AsyncIterator[Server]:
    server = Server(handler, read_body=read_body)
    listening = await asyncio.start_server(server.serve, "127.0.0.1", 0, ssl=tls)
    server.port = listening.sockets[0].getsockname()[1]
    async with listening:
        try:
            yield server
        finally:  # handlers still waiting (a silent server) end with the test
            for task in server.tasks:
                task.cancel()
            await asyncio.gather(*server.tasks, return_exceptions=True)


@asynccontextmanager
async def connected(handler: Handler, **options: float) -> AsyncIterator[tuple[Server, HttpPool]]:
    async with serving(handler) as server, pool(**options) as client:
        yield server, client


def pool(**options: float) -> HttpPool:
    settings = {"limit": 4, "connect_timeout": 5.0, "read_timeout": 5.0, **options}
    return HttpPool(
        limit=int(settings["limit"]),
        connect_timeout=settings["connect_timeout"],
        read_timeout=settings["read_timeout"],
    )


async def get(client: HttpPool, server: Server, body: tuple[bytes, ...] = ()) -> Response:
    origin = Origin.of(f"http://127.0.0.1:{server.port}")
    headers = {"host": origin.netloc}
    return await client.request(origin, "PUT" if body else "GET", "/k", headers, body)


def answer(*parts: bytes, close: bool = False, pause: float = 0.0) -> Handler:
    """A handler writing ``parts`` one after another (``pause`` seconds apart)."""

    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            writer.write(part)
            await writer.drain()
            if pause:
                await asyncio.sleep(pause)
        if close:
            writer.close()

    return handler


def sized(body: bytes, *extra: bytes) -> bytes:
    return OK + b"content-length: %d\r\n" % len(body) + b"".join(extra) + b"\r\n" + body


async def test_a_body_of_known_length_and_a_kept_alive_connection() -> None:
    """Two requests, one connection; the body arrives whole, however it is split."""
    payload = bytes(range(256)) * 4096  # 1 MiB
    response = sized(payload, b'ETag: "x"\r\n')
    parts = [response[i : i + 65_521] for i in range(0, len(response), 65_521)]
    async with connected(answer(*parts)) as (server, client):
        first, second = await get(client, server), await get(client, server)
    assert first.status == second.status == 200
    assert first.body == second.body == payload
    assert first.headers["etag"] == '"x"'
    assert server.connections == 1


async def test_a_head_split_byte_by_byte() -> None:
    response = sized(b"hello", b"X-A: 1\r\nX-A: 2\r\n")
    async with connected(answer(*(response[i : i + 1] for i in range(len(response))))) as (
        server,
        client,
    ):
        reply = await get(client, server)
    assert reply.body == b"hello"
    assert reply.headers["x-a"] == "1, 2"


async def test_a_chunked_body_with_extensions_and_trailers() -> None:
    """Chunked framing, sent in awkward pieces: the chunks joined, the trailers skipped, and the
    connection kept for the next request."""
    wire = (
        OK + b"Transfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n"
        b"1\r\n \r\n"
        b"A\r\n0123456789\r\n"
        b"0\r\nX-Trailer: t\r\n\r\n"
    )
    async with connected(answer(*(wire[i : i + 3] for i in range(0, len(wire), 3)))) as (
        server,
        client,
    ):
        replies = [await get(client, server) for _ in range(2)]
    assert [r.body for r in replies] == [b"hello 0123456789"] * 2
    assert server.connections == 1


async def test_a_body_until_the_connection_closes() -> None:
    """Such a body is taken (and said to be one: nothing tells it whole) and its connection
    never reused; so is an HTTP/1.0 response's, unless it asked to keep it."""
    async with connected(answer(OK + b"\r\nno length", close=True)) as (server, client):
        first, second = await get(client, server), await get(client, server)
    assert first.body == second.body == b"no length"
    assert first.until_close and server.connections == 2
    async with connected(answer(b"HTTP/1.0 200 OK\r\ncontent-length: 1\r\n\r\nx")) as (
        server,
        client,
    ):
        replies = [await get(client, server) for _ in range(2)]
    assert [(r.body, r.until_close) for r in replies] == [(b"x", False)] * 2
    assert server.connections == 2


async def test_connection_close_is_honoured() -> None:
    async with connected(answer(sized(b"x", b"Connection: close\r\n"))) as (server, client):
        await get(client, server)
        await get(client, server)
    assert server.connections == 2


async def test_an_interim_response_is_skipped_and_no_content_has_no_body() -> None:
    async with connected(answer(b"HTTP/1.1 100 Continue\r\n\r\n" + sized(b"late"))) as (
        server,
        client,
    ):
        assert (await get(client, server)).body == b"late"
    async with connected(answer(b"HTTP/1.1 204 No Content\r\n\r\n")) as (server, client):
        replies = [await get(client, server) for _ in range(2)]
    assert [(r.status, r.body) for r in replies] == [(204, b"")] * 2
    assert server.connections == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced() -> None:
    """A kept-alive connection closed by the server between requests: the request goes out
    again on a new connection, unseen by the caller."""
    async with connected(answer(sized(b"x"), close=True)) as (server, client):
        await get(client, server)
        await asyncio.sleep(0.05)  # the close reaches the client
        assert (await get(client, server)).body == b"x"
    assert server.connections == 2


async def test_a_truncated_body_fails() -> None:
    async with connected(answer(OK + b"content-length: 100\r\n\r\nshort", close=True)) as (
        server,
        client,
    ):
        with pytest.raises(HttpError, match=r"before the response was whole \(\d+ bytes"):
            await get(client, server)


async def test_a_closed_connection_without_a_response_fails_when_new() -> None:
    async with connected(answer(close=True)) as (server, client):
        with pytest.raises(HttpError, match="before the response"):
            await get(client, server)


@pytest.mark.parametrize(
    ("wire", "match"),
    [
        (b"SPDY/3 200 OK\r\n\r\n", "not an HTTP/1.1 response"),
        (b"HTTP/1.1 20\r\ncontent-length: 0\r\n\r\n", "not an HTTP/1.1 response"),
        (b"HTTP/1.1 2000 OK\r\ncontent-length: 0\r\n\r\n", "not an HTTP/1.1 response"),
        (OK + b"no colon here\r\n\r\n", "malformed response header"),
        (OK + b"content-length: -1\r\n\r\n", "bad Content-Length"),
        (OK + b"content-length: 1\r\n\r\ntoo long", "more response data"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n", "bad chunk size"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n-3\r\n\r\n", "bad chunk size"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n", "bad chunk"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + OK, "after the last chunk"),
        (OK + "content-length: \u00b2\r\n\r\n".encode("latin-1"), "bad Content-Length"),
        (b"HTTP/1.1 101 Switching Protocols\r\n\r\n", "protocol switch"),
        (OK + b"Transfer-Encoding: chunked\r\n\r\n1\r\nabc\r\n", "not followed by CRLF"),
        (OK + b"X: " + b"y" * MAX_HEAD_BYTES, "response head over"),
    ],
    ids=[
        "version",
        "short-status",
        "long-status",
        "header",
        "length",
        "excess",
        "chunk-size",
        "negative-chunk",
        "hex-prefix",
        "after-last-chunk",
        "non-ascii-digit",
        "switch",
        "chunk-end",
        "head-size",
    ],
)
async def test_a_malformed_response_fails(wire: bytes, match: str) -> None:
    async with connected(answer(wire)) as (server, client):
        with pytest.raises(HttpError, match=match):
            await get(client, server)


async def test_a_silent_server_times_out() -> None:
    """No response data for the read timeout: TimeoutError (progress re-arms it)."""
    async with connected(
        answer(OK, b"content-length: 1\r\n\r\n", b"a", pause=0.15), read_timeout=0.4
    ) as (server, client):
        assert (await get(client, server)).status == 200
    async with serving(answer(OK, pause=5)) as server:
        loop = asyncio.get_running_loop()
        began = loop.time()
        async with pool(read_timeout=0.3) as client:
            with pytest.raises(TimeoutError, match=r"no response data for 0\.3 s"):
                await get(client, server)
        assert loop.time() - began < 2


async def test_a_large_request_body_goes_out_whole_under_flow_control() -> None:
    """A 24 MiB body in pieces of every kind (more than the socket takes at once)."""
    pieces = (b"a" * (9 << 20), bytearray(b"b" * (7 << 20)), memoryview(b"c" * (8 << 20)))
    async with connected(answer(sized(b""))) as (server, client):
        reply = await get(client, server, pieces)
    ((head, body),) = server.requests
    assert reply.status == 200
    assert b"content-length: %d" % (24 << 20) in head
    assert zlib.crc32(body) == zlib.crc32(b"".join(bytes(p) for p in pieces))


async def test_an_early_answer_ends_the_request() -> None:
    """The server refuses before reading the body (as S3 may with an error): its answer is
    the response."""

    early = b"HTTP/1.1 400 Bad Request\r\ncontent-length: 8\r\nConnection: close\r\n\r\n<Error/>"
    async with serving(answer(early, pause=0.5, close=True), read_body=False) as server:
        origin = Origin.of(f"http://127.0.0.1:{server.port}")
        body = (b"x" * (32 << 20),)
        async with pool() as client:
            reply = await client.request(origin, "PUT", "/k", {"host": origin.netloc}, body)
    assert (reply.status, bytes(reply.body)) == (400, b"<Error/>")


async def test_an_early_answer_is_not_followed_by_a_reused_connection() -> None:
    """A server that answers before the request body is all sent (keeping the connection
    open) may still expect the rest of it: the connection is not reused."""
    early = b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n"
    async with serving(answer(early), read_body=False) as server, pool() as client:
        origin = Origin.of(f"http://127.0.0.1:{server.port}")
        big = (b"x" * (32 << 20),)
        reply = await client.request(origin, "PUT", "/k", {"host": origin.netloc}, big)
        assert reply.status == 403
        assert not client._idle


async def test_bytes_past_a_response_are_never_taken_for_the_next_one() -> None:
    """A server sends more than its Content-Length (here what looks like a second response)
    and the next request follows at once, before the event loop has read those bytes: the
    connection is not reused, and the next request gets its own answer."""
    calls = []

    async def handler(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        calls.append(None)
        if len(calls) > 1:
            writer.write(sized(b"RIGHT"))
            return
        writer.write(OK + b"content-length: 4\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(0.05)  # the body and the surplus arrive in one read
        writer.write(b"GOOD" + sized(b"WRONG"))

    async with connected(handler) as (server, client):
        first = await get(client, server)
        second = await get(client, server)  # no await in between that lets the loop read
    assert (bytes(first.body), bytes(second.body)) == (b"GOOD", b"RIGHT")
    assert server.connections == 2


async def test_an_answer_while_the_last_slice_is_queued_is_not_followed_by_reuse(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The server answers (keeping the connection) once the whole body was handed to the
    transport, but before all of it left: the connection is not reused."""
    import socket

    from rlcd.storage import _http1 as http1

    made = http1._Exchange.connection_made

    def small_buffers(self: http1._Exchange, transport: asyncio.BaseTransport) -> None:
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        made(self, transport)

    monkeypatch.setattr(http1._Exchange, "connection_made", small_buffers)
    total = 2 << 20
    answered, handlers = asyncio.Event(), []

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())
        await reader.readuntil(b"\r\n\r\n")
        await reader.readexactly(total - 200_000)  # not the last 200 kB
        await asyncio.sleep(0.2)
        writer.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
        await writer.drain()
        await answered.wait()  # keeps the connection open until the client is done
        writer.close()
        await writer.wait_closed()

    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    server = await asyncio.start_server(handler, sock=listener)
    origin = Origin.of(f"http://127.0.0.1:{listener.getsockname()[1]}")
    async with server, pool() as client:
        reply = await client.request(origin, "PUT", "/k", {"host": origin.netloc}, [bytes(total)])
        assert reply.status == 400
        assert not client._idle
        answered.set()
        await asyncio.gather(*handlers, return_exceptions=True)


async def test_a_request_cancelled_while_its_body_waits_leaves_nothing_behind() -> None:
    """Cancelled while the socket is full (the server reads nothing): the connection is
    closed and no future is left with an exception nobody retrieves."""
    loop = asyncio.get_running_loop()
    reported: list[str] = []
    loop.set_exception_handler(lambda _, context: reported.append(context["message"]))

    async def deaf(_: asyncio.StreamReader, __: asyncio.StreamWriter) -> None:
        await asyncio.sleep(5)

    try:
        async with serving(deaf, read_body=False) as server, pool() as client:
            origin = Origin.of(f"http://127.0.0.1:{server.port}")
            big = (b"x" * (64 << 20),)
            task = asyncio.ensure_future(client.request(origin, "PUT", "/k", {"host": "h"}, big))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            del task
            assert not client._idle
            await asyncio.sleep(0.05)
        gc.collect()
        await asyncio.sleep(0.05)
    finally:
        loop.set_exception_handler(None)
    assert not [m for m in reported if "never retrieved" in m]


async def test_idle_connections_are_bounded_across_origins() -> None:
    """Each origin keeps its connection alive, but no more than ``limit`` stay idle in all:
    the oldest are closed."""
    async with (
        serving(answer(sized(b"a"))) as one,
        serving(answer(sized(b"b"))) as two,
        serving(answer(sized(b"c"))) as three,
        pool(limit=2) as client,
    ):
        for server in (one, two, three, three):
            await get(client, server)
        assert [origin.port for _, origin, _ in client._idle] == [two.port, three.port]
    assert (one.connections, two.connections, three.connections) == (1, 1, 1)


async def test_a_cancelled_request_closes_its_connection() -> None:
    async with connected(answer(OK, pause=5)) as (server, client):
        task = asyncio.ensure_future(get(client, server))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert not client._idle


async def test_at_most_limit_requests_at_once() -> None:
    busy = peak = 0

    async def slow(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal busy, peak
        busy += 1
        peak = max(peak, busy)
        await asyncio.sleep(0.05)
        busy -= 1
        writer.write(sized(b"x"))
        await writer.drain()

    async with connected(slow, limit=2) as (server, client):
        await asyncio.gather(*(get(client, server) for _ in range(6)))
    assert peak == 2
    assert server.connections == 2


def _certificate(tmp_path: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_tls_with_the_callers_context(tmp_path: Path) -> None:
    """https goes through the given SSL context: a server it trusts answers; one it does not
    fails with the SSL error, not an HttpError."""
    cert, key = _certificate(tmp_path)
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    served.load_cert_chain(cert, key)
    payload = b"z" * (3 << 20)
    async with serving(answer(sized(payload)), tls=served) as server:
        origin = Origin.of(f"https://127.0.0.1:{server.port}")
        trusting = ssl.create_default_context(cafile=str(cert))
        async with HttpPool(
            limit=2, connect_timeout=5, read_timeout=5, ssl_context=trusting
        ) as client:
            replies = [
                await client.request(origin, "GET", "/k", {"host": origin.netloc}) for _ in "ab"
            ]
        assert [r.body == payload for r in replies] == [True, True]
        assert server.connections == 1
        strict = ssl.create_default_context()
        async with HttpPool(limit=1, connect_timeout=5, read_timeout=5, ssl_context=strict) as c:
            with pytest.raises(ssl.SSLCertVerificationError):
                await c.request(origin, "GET", "/k", {"host": origin.netloc})


def test_origins() -> None:
    assert Origin.of("https://b.s3.eu-west-1.amazonaws.com/k?x=1") == Origin(
        "https", "b.s3.eu-west-1.amazonaws.com", 443, "b.s3.eu-west-1.amazonaws.com"
    )
    assert Origin.of("http://127.0.0.1:5000/bucket/") == Origin(
        "http", "127.0.0.1", 5000, "127.0.0.1:5000"
    )
    with pytest.raises(ValueError, match="not an http"):
        Origin.of("ftp://host/")
