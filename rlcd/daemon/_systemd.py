"""systemd's notify protocol, in the few lines it takes (no systemd library).

Under ``Type=notify`` systemd passes ``NOTIFY_SOCKET``: a unix datagram socket path, or an
abstract socket when it starts with ``@``. Each message is one datagram of ``KEY=value`` lines
(sd_notify(3)): ``READY=1`` once the service is up, ``STATUS=`` a one-line summary,
``WATCHDOG=1`` a keep-alive, ``STOPPING=1`` on shutdown. With ``WatchdogSec=`` set, systemd
passes ``WATCHDOG_USEC`` (and ``WATCHDOG_PID``, the process meant to ping: another process
ignores it) and restarts the service when no ping arrives in time; :func:`run_watchdog` pings
at half that interval from the event loop itself, so a loop that is stuck stops pinging and
gets restarted, as it should.

Outside systemd (no ``NOTIFY_SOCKET``) every call does nothing. A failed send is logged, never
raised: losing a status line must not stop the daemon.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

import anyio
import structlog
from anyio.abc import TaskStatus

__all__ = ("Notifier", "run_watchdog")

log = structlog.get_logger(__name__)


class Notifier:
    """Sends sd_notify messages to the socket in ``env`` (the process environment by default).

    Args:
        env: where ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` are read.
        pid: this process's id, compared with ``WATCHDOG_PID``.
    """

    def __init__(self, env: Mapping[str, str] | None = None, *, pid: int | None = None) -> None:
        env = os.environ if env is None else env
        raw = env.get("NOTIFY_SOCKET", "")
        self.address: str | None = ("\0" + raw[1:] if raw.startswith("@") else raw) or None
        self.watchdog_interval_s = _watchdog_interval(env, os.getpid() if pid is None else pid)

    @property
    def enabled(self) -> bool:
        """Whether systemd is listening (``NOTIFY_SOCKET`` is set)."""
        return self.address is not None

    def send(self, **fields: str) -> bool:
        """Send ``KEY=value`` lines as one datagram; True if it was sent.

        Values are made single-line (a newline would start another field).
        """
        if self.address is None:
            return False
        message = "\n".join(f"{k}={' '.join(v.splitlines())}" for k, v in fields.items())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.setblocking(False)  # a full receive queue must never stall the event loop
                sock.sendto(message.encode(), self.address)
        except OSError as exc:
            log.warning("sd_notify_failed", socket=self.address, error=str(exc))
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        """``READY=1``: the config is loaded and the endpoints listen."""
        return self.send(READY="1", **({} if status is None else {"STATUS": status}))

    def status(self, text: str) -> bool:
        """``STATUS=``: the one-line summary ``systemctl status`` shows."""
        return self.send(STATUS=text)

    def watchdog(self) -> bool:
        """``WATCHDOG=1``: the event loop is alive."""
        return self.send(WATCHDOG="1")

    def stopping(self, status: str | None = None) -> bool:
        """``STOPPING=1``: shutting down (draining bins in flight)."""
        return self.send(STOPPING="1", **({} if status is None else {"STATUS": status}))


def _watchdog_interval(env: Mapping[str, str], pid: int) -> float | None:
    """Half of ``WATCHDOG_USEC`` in seconds, or None when this process need not ping."""
    try:
        usec = int(env.get("WATCHDOG_USEC", "0"))
        meant_for = int(env["WATCHDOG_PID"]) if env.get("WATCHDOG_PID") else pid
    except ValueError:
        log.warning(
            "sd_watchdog_ignored",
            watchdog_usec=env.get("WATCHDOG_USEC"),
            watchdog_pid=env.get("WATCHDOG_PID"),
        )
        return None
    if usec <= 0 or meant_for != pid:
        return None
    return usec / 2 / 1_000_000


async def run_watchdog(
    notifier: Notifier, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """Ping ``WATCHDOG=1`` every half watchdog interval until cancelled; start it with
    ``tg.start(run_watchdog, notifier)``. Returns at once when there is no watchdog."""
    interval = notifier.watchdog_interval_s
    if interval is None or not notifier.enabled:
        task_status.started()
        return
    notifier.watchdog()
    task_status.started()
    while True:
        await anyio.sleep(interval)
        notifier.watchdog()
