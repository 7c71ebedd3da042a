"""Structured JSON logs (structlog), for the operator's own lines and for kopf's.

Every line about a session carries `session`, `namespace` and, where known, `claim`.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog


def configure(level: str = "INFO", json: bool = True) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer()
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            # kopf and the client libraries log through the standard library: same format for them.
            foreign_pre_chain=[*shared, structlog.stdlib.ExtraAdder()],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    for noisy in ("aiohttp.access", "kubernetes_asyncio.client.rest"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


def logger(**context: Any) -> Any:
    return structlog.get_logger("agentsession").bind(**context)
