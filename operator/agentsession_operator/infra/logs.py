"""Structured JSON logs (structlog), for the operator's own lines and for kopf's.

Every line about a session carries `session`, `namespace` and, where known, `claim`.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog


def configure(level: str = "INFO", json: bool = True) -> None:
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        redact_env,
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
            foreign_pre_chain=[*shared, _kopf_object],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kopf logs every successful event handler at INFO: one line per watch event is noise here.
    for noisy in ("aiohttp.access", "kopf.objects"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    logging.getLogger("kopf.objects").addFilter(_refusals_are_not_errors)


REDACTED = "<redacted>"


def _redacted(value: Any) -> Any:
    if isinstance(value, dict):
        out = {k: _redacted(v) for k, v in value.items()}
        if isinstance(value.get("env"), list):  # a session's, a claim's or a container's env: names only
            out["env"] = [{**e, "value": REDACTED} if isinstance(e, dict) and "value" in e else e for e in value["env"]]
        return out
    if isinstance(value, list | tuple):
        return [_redacted(v) for v in value]
    return value


def redact_env(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """Env values are often secrets (tokens, keys): no log line carries one, whichever field holds a
    manifest, a patch or a spec. Names stay, to say which variable was set."""
    for key, value in list(event.items()):
        if isinstance(value, dict | list | tuple):
            event[key] = _redacted(value)
    return event


def _refusals_are_not_errors(record: logging.LogRecord) -> bool:
    """kopf logs an admission refusal as a failed webhook at ERROR; the webhook logs it at INFO already."""
    return not str(record.msg).startswith("Webhook 'policy' failed permanently")


def _kopf_object(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """kopf's per-object records carry the object in `k8s_ref`: keep its kind, namespace and name only."""
    record = event.get("_record")
    ref = getattr(record, "k8s_ref", None)
    if isinstance(ref, dict):
        event.update(kind=ref.get("kind"), namespace=ref.get("namespace"), name=ref.get("name"))
    return event


def logger(**context: Any) -> Any:
    # Without context, the lazy proxy itself: a module-level `_log = logger()` runs at import, before
    # configure(), and bind() there fixed structlog's default (console) renderer into it for good.
    if not context:
        return structlog.get_logger("agentsession")
    return structlog.get_logger("agentsession").bind(**context)
