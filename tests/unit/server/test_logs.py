"""Structured log lines: one JSON object each, with the fields a log pipeline indexes."""

from __future__ import annotations

import logging
import sys

import orjson

from gangplugin.server.logs import JsonFormatter, TextFormatter


def _record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("gangplugin.admission", logging.WARNING, __file__, 1, msg, args, None)
    record.__dict__.update(extra)
    return record


def test_json_line_has_the_standard_fields_and_extras() -> None:
    line = JsonFormatter().format(_record("gang %s waits", "g1", workload="ns/wl", gang="g1", node=None))
    assert "\n" not in line
    doc = orjson.loads(line)
    assert doc["level"] == "warning"
    assert doc["logger"] == "gangplugin.admission"
    assert doc["msg"] == "gang g1 waits"
    assert doc["ts"].endswith("+00:00") and "T" in doc["ts"]
    assert (doc["workload"], doc["gang"], doc["node"]) == ("ns/wl", "g1", None)
    assert "args" not in doc and "levelno" not in doc


def test_exceptions_and_unencodable_fields_stay_on_one_line() -> None:
    try:
        raise ValueError("bad\nthing")
    except ValueError:
        record = _record("failed", thing=object())
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    doc = orjson.loads(line)
    assert "ValueError: bad" in doc["exc"]
    assert doc["thing"].startswith("<object object")


def test_text_shows_the_extras_too() -> None:
    line = TextFormatter().format(_record("admitted", workload="ns/wl"))
    assert line.endswith("WARNING gangplugin.admission: admitted workload=ns/wl")
