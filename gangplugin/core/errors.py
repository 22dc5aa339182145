"""The one error type the core raises for bad input."""

from __future__ import annotations


class InputError(ValueError):
    """Input that cannot be used, with the field at fault and how to fix it.

    `str(err)` is one line a person can act on; the CLI prints it and exits 2.
    """

    def __init__(self, field: str, problem: str) -> None:
        self.field = field
        self.problem = problem
        super().__init__(f"{field}: {problem}")
