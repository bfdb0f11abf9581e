"""sd_notify over a real unix datagram socket: the messages, the watchdog interval and its
pings from the event loop."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
from structlog.testing import capture_logs

from rlcd.daemon._systemd import Notifier, run_watchdog


@pytest.fixture
def abstract_socket() -> Iterator[tuple[str, socket.socket]]:
    """A listening abstract datagram socket, as ``NOTIFY_SOCKET`` spells it (``@name``)."""
    name = f"rlcd-test-{uuid.uuid4()}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(30)  # a missing message fails the test instead of hanging it
        yield "@" + name, sock


def test_without_notify_socket_nothing_is_sent() -> None:
    """Outside systemd the notifier is disabled and every message is a no-op."""
    n = Notifier({})
    assert not n.enabled
    assert n.ready("up") is False and n.watchdog() is False
    assert n.watchdog_interval_s is None


def test_ready_with_status_is_one_datagram_on_an_abstract_socket(
    abstract_socket: tuple[str, socket.socket],
) -> None:
    """READY=1 and its STATUS= arrive together on an ``@`` (abstract) socket."""
    address, sock = abstract_socket
    assert Notifier({"NOTIFY_SOCKET": address}).ready("3 tables, 0 bins in flight")
    assert sock.recv(4096) == b"READY=1\nSTATUS=3 tables, 0 bins in flight"


def test_status_watchdog_and_stopping_on_a_socket_path(tmp_path: Path) -> None:
    """STATUS=, WATCHDOG=1 and STOPPING=1 arrive, in order, on a filesystem socket."""
    path = str(tmp_path / "notify")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind(path)
        sock.settimeout(30)
        n = Notifier({"NOTIFY_SOCKET": path})
        assert n.status("compacting s3://b/t\nbin 3")
        assert n.watchdog()
        assert n.stopping("draining 2 bins")
        got = [sock.recv(4096) for _ in range(3)]
    assert got == [
        b"STATUS=compacting s3://b/t bin 3",  # a newline would start another field
        b"WATCHDOG=1",
        b"STOPPING=1\nSTATUS=draining 2 bins",
    ]


def test_a_socket_nobody_listens_on_is_logged_not_raised() -> None:
    """A failed send returns False and logs a warning; the daemon carries on."""
    n = Notifier({"NOTIFY_SOCKET": f"@rlcd-nobody-{uuid.uuid4()}"})
    with capture_logs() as logs:
        assert n.ready() is False
    assert [e["event"] for e in logs] == ["sd_notify_failed"]


@pytest.mark.parametrize(
    ("env", "interval"),
    [
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4242"}, 15.0),
        ({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "4243"}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "soon"}, None),
        ({}, None),
    ],
)
def test_the_watchdog_interval_is_half_of_watchdog_usec_for_this_pid(
    env: dict[str, str], interval: float | None
) -> None:
    """Ping at half WATCHDOG_USEC, only when WATCHDOG_PID (if set) is this process."""
    assert Notifier({"NOTIFY_SOCKET": "@x", **env}, pid=4242).watchdog_interval_s == interval


@pytest.mark.anyio
async def test_the_watchdog_task_pings_from_the_event_loop(
    abstract_socket: tuple[str, socket.socket],
) -> None:
    """Started with tg.start, the task pings WATCHDOG=1 at once and then every interval."""
    address, sock = abstract_socket
    env = {"NOTIFY_SOCKET": address, "WATCHDOG_USEC": "20000", "WATCHDOG_PID": str(os.getpid())}
    n = Notifier(env)
    assert n.watchdog_interval_s == 0.01
    async with anyio.create_task_group() as tg:
        await tg.start(run_watchdog, n)
        pings = [await anyio.to_thread.run_sync(sock.recv, 4096) for _ in range(3)]
        tg.cancel_scope.cancel()
    assert pings == [b"WATCHDOG=1"] * 3


@pytest.mark.anyio
async def test_without_a_watchdog_the_task_ends_at_once() -> None:
    """No WATCHDOG_USEC: the watchdog task reports started and returns."""
    async with anyio.create_task_group() as tg:
        await tg.start(run_watchdog, Notifier({"NOTIFY_SOCKET": "@x"}))
