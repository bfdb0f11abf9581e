"""structlog setup, done once by the process entry point (library code only calls
``structlog.get_logger``). JSON lines for services and pipes; a console renderer on a TTY."""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog

__all__ = ("configure_logging",)


def configure_logging(
    *, level: str = "info", json: bool | None = None, stream: TextIO | None = None
) -> None:
    """Route rlcd's events to ``stream`` (stderr by default) at ``level``.

    Args:
        level: minimum level name (debug, info, warning, error).
        json: force JSON (True) or the console renderer (False); None picks console on a TTY.
        stream: where to write.
    """
    out = stream or sys.stderr
    as_json = not out.isatty() if json is None else json
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[
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
