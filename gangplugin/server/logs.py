"""Structured logs: one JSON object per line (`ts`, `level`, `logger`, `msg`, and any `extra=`
fields such as `workload`, `gang`, `node`), or the same as plain text for a person at a terminal.

A Formatter over orjson rather than a logging library: a dozen lines, and the JSON encoder the
project already uses on its hot paths (it serialises datetimes and dataclasses natively).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

# Attributes every LogRecord has; anything else on a record came from `extra=` and is logged.
_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _extra(record: logging.LogRecord) -> list[tuple[str, Any]]:
    return [(k, v) for k, v in record.__dict__.items() if k not in _STANDARD and not k.startswith("_")]


def _default(value: Any) -> str:
    return repr(value)  # a field orjson cannot encode is logged as its repr, never dropped


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        doc.update(_extra(record))
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            doc["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(doc, default=_default).decode()


class TextFormatter(logging.Formatter):
    """`ts LEVEL logger: msg key=value ...` — the extra fields stay visible in text too."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        extra = " ".join(f"{k}={v}" for k, v in _extra(record))
        return f"{line} {extra}" if extra else line


def configure(level: str, fmt: str) -> None:
    """Route every logger to stderr in `fmt` ("json" or "text") at `level`."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO (a Lease renewal every 2 s): noise, not news.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))
