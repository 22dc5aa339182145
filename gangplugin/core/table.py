"""Plain-text tables as kubectl prints them: each column as wide as its widest cell, two spaces
apart, no trailing blanks, "-" for a missing value. The one table printer of gangctl and of the
simulator's report."""

from __future__ import annotations

from collections.abc import Sequence


def cell(value: object) -> str:
    return "-" if value is None else str(value)


def column_widths(header: Sequence[str], rows: Sequence[Sequence[object]]) -> list[int]:
    return [max(len(cell(r[i])) for r in [header, *rows]) for i in range(len(header))]


def table(
    header: Sequence[str],
    rows: Sequence[Sequence[object]],
    widths: Sequence[int] | None = None,
    *,
    show_header: bool = True,
) -> str:
    """The rows under the header. `widths` (from `column_widths`) keeps later rows aligned with
    a table printed before them, as `get -w` prints one row per change; a longer cell widens its
    column rather than being cut."""
    widths = column_widths(header, rows) if widths is None else widths
    lines = [header, *rows] if show_header else list(rows)
    return "\n".join(
        "  ".join(cell(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in lines
    )
