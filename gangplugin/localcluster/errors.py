"""The one error the local cluster raises."""

from __future__ import annotations


class ClusterError(RuntimeError):
    """`up`, `down` or a restart could not do its work; the message says what failed and what to do."""
