"""The states an admission check's entry in a Workload's status takes (Kueue's
`AdmissionCheckState`), as one enum: compared by name everywhere, never as bare strings."""

from __future__ import annotations

from enum import StrEnum


class CheckState(StrEnum):
    PENDING = "Pending"  # the check has not decided (Kueue holds the Workload's admission)
    READY = "Ready"  # admitted: Kueue admits the Workload with the check's podSetUpdates
    RETRY = "Retry"  # Kueue evicts the Workload and requeues it
    REJECTED = "Rejected"  # Kueue deactivates the Workload

    @classmethod
    def of(cls, value: object) -> CheckState | None:
        """The state a status entry names (None: none, or one Kueue does not define)."""
        try:
            return cls(str(value))
        except ValueError:
            return None
