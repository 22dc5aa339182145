"""Every port a local cluster listens on, as offsets from one base: clusters with other bases
(GANGPLUGIN_PORT_BASE, GANGPLUGIN_E2E_PORT_BASE) run side by side. Offsets stay below 1,000."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_BASE = 21000


@dataclass(frozen=True, slots=True)
class Ports:
    """The ports of the components the local cluster knows; a component added later may take its
    own offsets with `at` (the registry's unit test keeps every port distinct)."""

    base: int = DEFAULT_BASE

    @classmethod
    def from_env(cls) -> Ports:
        return cls(int(os.environ.get("GANGPLUGIN_PORT_BASE", str(DEFAULT_BASE))))

    def at(self, offset: int) -> int:
        return self.base + offset

    @property
    def etcd(self) -> int:
        return self.base + 379

    @property
    def etcd_peer(self) -> int:
        return self.base + 380

    @property
    def apiserver(self) -> int:
        return self.base + 443

    @property
    def controller_manager(self) -> int:
        return self.base + 257

    @property
    def scheduler(self) -> int:
        return self.base + 259

    @property
    def kwok(self) -> int:
        return self.base + 247

    @property
    def kueue_webhook(self) -> int:
        return self.base + 943

    @property
    def kueue_metrics(self) -> int:
        return self.base + 880

    @property
    def kueue_health(self) -> int:
        return self.base + 881

    @property
    def jobset_webhook(self) -> int:
        return self.base + 945

    @property
    def jobset_metrics(self) -> int:
        return self.base + 882

    @property
    def jobset_health(self) -> int:
        return self.base + 883

    @property
    def gangplugin_health(self) -> int:
        return self.base + 610

    @property
    def gangplugin_extender(self) -> int:
        return self.base + 611

    @property
    def gangplugin_webhook(self) -> int:
        return self.base + 612

    @property
    def gangplugin_grpc(self) -> int:
        return self.base + 613

    @property
    def gangplugin_grpc_mtls(self) -> int:
        """Replica 1's gRPC port for client-certificate callers (kubectl's admin user)."""
        return self.base + 609

    def gangplugin_console(self, n: int = 1) -> int:
        """The web console of `gangplugin serve` replica n (every replica serves it): 608 for
        replica 1, 800 + n for the others (apart from the replicas' other ports, which take
        every port of 609-616: clusters 9 ports apart share none, see the tests)."""
        return self.base + 608 if n == 1 else self.base + 800 + n

    def gangplugin_replica(self, n: int) -> tuple[int, int, int]:
        """Health, gRPC and webhook ports of `gangplugin serve` replica n (1 has the ones above).
        Replicas share the extender's port: only the leader binds it, as a Service would pick
        the leader. The API server calls replica 1's webhook."""
        if n == 1:
            return self.gangplugin_health, self.gangplugin_grpc, self.gangplugin_webhook
        first = self.base + 614 + 3 * (n - 2)
        return first, first + 1, first + 2
