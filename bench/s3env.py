"""The S3 side of ``bench/compact.py --s3``: a moto server on 127.0.0.1, an optional proxy that
adds latency, a request counter, and server-side copies of the table for each run.

The proxy forwards TCP both ways; every chunk a client sends is held ``latency_ms`` before it
is forwarded (a timestamped queue, so throughput is not cut: a request waits one latency, as on
a network with that much delay to the store). Requests are counted by moto's request log
(werkzeug logs one line per request), so both contenders are counted the same way. With
``--count-bytes`` the proxy runs (with no latency unless asked) to count the bytes each way.

moto's server (werkzeug) closes the connection after every response, so here each request of
either contender opens a TCP connection (one per request), where S3 keeps them open. A
keep-alive HTTP proxy in front, tried, did not change rlcd's CPU and slowed delta-rs (each of
its requests paid the extra hop), so it is not used.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from typing import Any

BUCKET = "rlcd-bench"
REGION = "us-east-1"
KEYS = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")  # werkzeug colours some status lines


class RequestCounter(logging.Handler):
    """Counts moto's requests by HTTP method (from werkzeug's request log lines)."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.counts: collections.Counter[str] = collections.Counter()
        self._lock2 = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        args = record.args
        if isinstance(args, tuple) and args and isinstance(args[0], str) and " " in args[0]:
            method = _COLOUR.sub("", args[0]).split(" ", 1)[0]
            with self._lock2:
                self.counts[method] += 1

    def take(self) -> dict[str, int]:
        """The counts since the last call, and reset."""
        with self._lock2:
            counts, self.counts = dict(self.counts), collections.Counter()
        return counts


class LatencyProxy:
    """A TCP proxy on 127.0.0.1 adding ``latency_ms`` to every client-to-server chunk and
    counting the bytes it carries each way (``up``: to the server, ``down``: to the client),
    as the network sees them: what a compactor really downloads and uploads."""

    def __init__(self, upstream_port: int, latency_ms: float) -> None:
        self._upstream, self._delay = upstream_port, latency_ms / 1000
        self._moved: collections.Counter[str] = collections.Counter()
        self._moved_lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(10)

    def take(self) -> dict[str, int]:
        """The bytes carried each way since the last call, and reset."""
        with self._moved_lock:
            moved, self._moved = dict(self._moved), collections.Counter()
        return moved

    def _count(self, way: str, n: int) -> None:
        with self._moved_lock:
            self._moved[way] += n

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _shutdown(self) -> None:
        tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._upstream)
        except OSError:
            writer.close()
            return
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, self._delay, partial(self._count, "up")),
                self._pipe(up_reader, writer, 0.0, partial(self._count, "down")),
                return_exceptions=True,
            )
        except asyncio.CancelledError:
            # the proxy is stopping; ending quietly keeps asyncio's stream callback (which asks
            # a cancelled task for its exception, Python 3.11) from printing a traceback
            writer.close()

    @staticmethod
    async def _pipe(
        src: asyncio.StreamReader,
        dst: asyncio.StreamWriter,
        delay: float,
        count: Callable[[int], None],
    ) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def send() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    break
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                dst.write(data)
                await dst.drain()
            dst.close()

        sender = asyncio.ensure_future(send())
        try:
            while data := await src.read(1 << 16):
                count(len(data))
                queue.put_nowait((time.monotonic() + delay, data))
        finally:
            queue.put_nowait((0.0, b""))
            await sender


class S3Bench:
    """The moto server, the proxy (with ``latency_ms`` or ``count_bytes``) and a boto3
    client, for one bench run."""

    def __init__(self, latency_ms: float, *, count_bytes: bool = False) -> None:
        self.latency_ms = latency_ms
        self.count_bytes = count_bytes
        self.counter = RequestCounter()
        self._server: Any = None
        self._proxy: LatencyProxy | None = None
        self.endpoint = ""
        self.client: Any = None

    @contextmanager
    def running(self) -> Iterator[S3Bench]:
        import boto3
        from moto.server import ThreadedMotoServer

        log = logging.getLogger("werkzeug")
        log.setLevel(logging.INFO)
        log.propagate = False
        log.addHandler(self.counter)
        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        port = self._server.get_host_and_port()[1]
        if self.latency_ms > 0 or self.count_bytes:
            self._proxy = LatencyProxy(port, self.latency_ms)
            self._proxy.start()
            port = self._proxy.port
        self.endpoint = f"http://127.0.0.1:{port}"
        self.client = boto3.client("s3", endpoint_url=self.endpoint, region_name=REGION, **KEYS)
        self.client.create_bucket(Bucket=BUCKET)
        try:
            yield self
        finally:
            if self._proxy is not None:
                self._proxy.stop()
            self._server.stop()
            log.removeHandler(self.counter)

    def take_bytes(self) -> dict[str, int] | None:
        """The bytes the proxy carried each way since the last call (None: no proxy)."""
        return None if self._proxy is None else self._proxy.take()

    def upload(self, local: Any, prefix: str) -> None:
        for path in sorted(p for p in local.rglob("*") if p.is_file()):
            key = f"{prefix}/{path.relative_to(local).as_posix()}"
            self.client.upload_file(str(path), BUCKET, key)

    def keys(self, prefix: str) -> dict[str, int]:
        """Every key under ``prefix/`` (relative to it) and its size."""
        found: dict[str, int] = {}
        for page in self.client.get_paginator("list_objects_v2").paginate(
            Bucket=BUCKET, Prefix=prefix + "/"
        ):
            for item in page.get("Contents", ()):
                found[item["Key"][len(prefix) + 1 :]] = int(item["Size"])
        return found

    def copy(self, source: str, dest: str) -> None:
        """A fresh server-side copy of ``source/`` at ``dest/``."""
        for key in self.keys(source):
            self.client.copy_object(
                Bucket=BUCKET,
                Key=f"{dest}/{key}",
                CopySource={"Bucket": BUCKET, "Key": f"{source}/{key}"},
            )

    def delete(self, prefix: str) -> None:
        keys = [{"Key": f"{prefix}/{k}"} for k in self.keys(prefix)]
        for i in range(0, len(keys), 1000):
            self.client.delete_objects(Bucket=BUCKET, Delete={"Objects": keys[i : i + 1000]})

    def uri(self, prefix: str) -> str:
        return f"s3://{BUCKET}/{prefix}"

    def environment(self) -> dict[str, str]:
        """What a contender's process needs to reach the server."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_REGION": REGION,
            "AWS_ACCESS_KEY_ID": KEYS["aws_access_key_id"],
            "AWS_SECRET_ACCESS_KEY": KEYS["aws_secret_access_key"],
        }
