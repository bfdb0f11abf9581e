"""The composition root: the one place that builds the daemon's real parts from its settings.

:func:`run_daemon` loads the config, sets up logging, opens the shared S3 client, builds the
limiters every table shares (:class:`~rlcd.daemon.supervise.Limits`), a metered store per
table, the metrics and health endpoint, and systemd's notifier, then runs the
:class:`~rlcd.daemon.supervise.Supervisor` under signal handling:

- SIGTERM, SIGINT: ``STOPPING=1``, stop planning, drain within the grace period, exit 0;
- SIGHUP: load the file again; a valid one replaces the settings atomically (tables, policies,
  limits, log level) and releases every quarantined source; once the tables are refreshed,
  ``config_reloaded`` says which keys and entries changed and counts the tables watched
  (named and discovered). A bad file is logged with its error and the old settings stay.

``READY=1`` is sent once the config is loaded and the endpoint listens; ``STATUS=`` after each
step of the loop; ``WATCHDOG=1`` from the event loop (:func:`~rlcd.daemon._systemd.run_watchdog`).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TextIO

import anyio
import structlog

from rlcd.daemon._systemd import Notifier, run_watchdog
from rlcd.daemon.config import Settings, load_settings, with_instance
from rlcd.daemon.logging import configure_logging
from rlcd.daemon.metrics import Metrics, serve_metrics, without_created_series
from rlcd.daemon.supervise import Limits, Supervisor
from rlcd.errors import ConfigError
from rlcd.storage import LocalStore, S3Client
from rlcd.storage.base import ObjectStore
from rlcd.storage.metered import MeteredStore
from rlcd.storage.uri import TableUri

__all__ = ("run_daemon", "Daemon")

log = structlog.get_logger(__name__)


def _configure(settings: Settings, stream: TextIO) -> None:
    configure_logging(level=settings.log.level, json=settings.log.json, stream=stream)


class Daemon:
    """The built daemon: settings, shared client and limiters, supervisor. Build it with
    :meth:`open`; :meth:`serve` runs it until stopped."""

    def __init__(
        self, path: str, settings: Settings, client: S3Client, *, instance: int | None
    ) -> None:
        self.path = path
        self.instance = instance
        self.client = client
        self.limits = Limits.of(settings)
        self.notifier = Notifier()
        self.metrics = Metrics()
        self.supervisor = Supervisor(
            settings,
            store_for=self._store_for,
            limits=self.limits,
            metrics=self.metrics,
            on_status=self.notifier.status,
        )
        self.listening: tuple[str, int] | None = None

    @classmethod
    @asynccontextmanager
    async def open(
        cls, path: str, *, instance: int | None = None, stream: TextIO
    ) -> AsyncIterator[Daemon]:
        """The daemon of the config file at ``path``, logging to ``stream``; the S3 client
        closes on exit.

        Raises:
            ConfigError: the file is invalid (names the file and key path).
        """
        settings = _load(path, instance)
        _configure(settings, stream)
        without_created_series()
        async with S3Client(settings.s3) as client:
            yield cls(path, settings, client, instance=instance)

    def _store_for(self, uri: TableUri) -> ObjectStore:
        inner: ObjectStore = self.client.store(uri) if uri.is_s3 else LocalStore(uri.prefix)
        return MeteredStore(inner, on_request=self.metrics.count_request)

    def reload(self, stream: TextIO) -> None:
        """Load the config again; keep the old one if the new one is bad."""
        try:
            settings = _load(self.path, self.instance)
        except ConfigError as exc:
            log.error("config_reload_failed", path=self.path, error=str(exc))
            return
        if settings.s3 != self.supervisor.settings.s3:
            log.warning("config_s3_needs_restart", path=self.path)
        _configure(settings, stream)
        self.supervisor.apply(settings)  # it logs ``config_reloaded`` once tables are refreshed

    async def serve(self, *, once: bool, stream: TextIO) -> tuple[type[BaseException], ...]:
        """Run until SIGTERM/SIGINT (or one pass with ``once``); returns, after one pass, the
        types of the errors of the tables it left failing (none when stopped by a signal)."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._signals, stream)
            await tg.start(run_watchdog, self.notifier)
            listen = self.supervisor.settings.metrics.listen
            if listen is not None:
                self.listening = await tg.start(
                    serve_metrics, self.metrics, self.supervisor.health, listen
                )
                log.info("metrics_listening", host=self.listening[0], port=self.listening[1])
            self.notifier.ready(f"watching {len(self.supervisor.settings.tables)} tables")
            log.info("daemon_started", config=self.path, once=once, pid=os.getpid())
            await self.supervisor.run(once=once)
            self.notifier.stopping("stopped")
            tg.cancel_scope.cancel()
        log.info("daemon_stopped")
        return self.supervisor.failures() if once else ()

    async def _signals(self, stream: TextIO) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP:
                    self.reload(stream)
                    continue
                log.info("stopping", signal=signal.Signals(signum).name)
                self.notifier.stopping("draining bins in flight")
                self.supervisor.stop()


def _load(path: str, instance: int | None) -> Settings:
    settings = load_settings(path)
    return settings if instance is None else with_instance(settings, instance)


async def run_daemon(
    path: str, *, once: bool = False, instance: int | None = None, stream: TextIO | None = None
) -> tuple[type[BaseException], ...]:
    """``rlcd run``: the daemon of the config at ``path``, logging JSON lines (console on a
    TTY) to ``stream`` (stdout). Returns what :meth:`Daemon.serve` returns.

    Raises:
        ConfigError: the config is invalid; nothing was started.
    """
    out = stream or sys.stdout
    async with Daemon.open(path, instance=instance, stream=out) as daemon:
        return await daemon.serve(once=once, stream=out)
