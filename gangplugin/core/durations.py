"""Durations written the way Kubernetes and Go write them ("90s", "5m", "1h30m", "0s")."""

from __future__ import annotations

import re

from gangplugin.core.errors import InputError

_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str, field: str) -> float:
    """Seconds in a Go duration string; `field` names the input in the error."""
    s = text.strip() if isinstance(text, str) else ""
    if s in ("0", "0s"):
        return 0.0
    pos, total = 0, 0.0
    while pos < len(s):
        m = _PART.match(s, pos)
        if m is None:
            break
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    if not s or pos != len(s):
        raise InputError(field, f"{text!r} is not a duration; write it like 90s, 5m or 1h30m")
    return total


def format_duration(seconds: float) -> str:
    """The shortest Go-style form of a whole number of seconds, e.g. 5400 -> "1h30m"."""
    rest = round(seconds)
    if rest == 0:
        return "0s"
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return "".join(f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v)
