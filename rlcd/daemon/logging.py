"""structlog setup, done once by the process entry point (library code only calls
``structlog.get_logger``). JSON lines for services and pipes; a console renderer on a TTY."""

from __future__ import annotations

import logging
import sys
from collections.abc import Collection, MutableMapping
from typing import Any, TextIO

import structlog

__all__ = ("configure_logging",)


def configure_logging(
    *,
    level: str = "info",
    json: bool | None = None,
    stream: TextIO | None = None,
    drop_events: Collection[str] = (),
) -> None:
    """Route rlcd's events to ``stream`` (stderr by default) at ``level``.

    Args:
        level: minimum level name (debug, info, warning, error).
        json: force JSON (True) or the console renderer (False); None picks console on a TTY.
        stream: where to write.
        drop_events: event names not to log at all (the CLI's report states them already).
    """
    out = stream or sys.stderr
    as_json = not out.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
            _Drop(frozenset(drop_events)),
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )


class _Drop:
    """A processor that drops the named events."""

    def __init__(self, events: frozenset[str]) -> None:
        self._events = events

    def __call__(
        self, _logger: object, _method: str, event: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        if event.get("event") in self._events:
            raise structlog.DropEvent
        return event
