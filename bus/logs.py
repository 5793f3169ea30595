"""structlog set-up for the bus's long-running commands (`membus webhook`, the MCP server,
whose stdout carries MCP on stdio): JSON lines to stderr when it is not a terminal, a console
renderer otherwise. (handlers/ has its own: bus may not import handlers.)"""

from __future__ import annotations

import logging
import sys
from typing import TextIO

import structlog


def configure_logging(level: str = "info", file: TextIO | None = None) -> None:
    """Log at `level` and above to `file` (default stderr); the standard library's loggers
    (nats-py's) go there too, from warnings up."""
    file = file or sys.stderr
    renderer: structlog.typing.Processor
    if file.isatty():
        renderer = structlog.dev.ConsoleRenderer()
    else:
        renderer = structlog.processors.JSONRenderer()
    numeric = logging.getLevelNamesMapping().get(level.upper(), logging.INFO)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric),
        logger_factory=structlog.PrintLoggerFactory(file=file),
        cache_logger_on_first_use=True,
    )
    logging.basicConfig(stream=file, level=max(numeric, logging.WARNING))
