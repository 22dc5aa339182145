"""The host side of a pool's network: its bridge (every node's CNI plugs its pods into it, so pods
reach each other and the host without routes of their own), the host's and the nodes' addresses
on it, kube-proxy's rules, and a table of the pool's own that silences a lost node (a machine that
loses power sends nothing more: no reset for its connections). kube-proxy's nftables tables
(`ip kube-proxy`, `ip6 kube-proxy`) and the Service addresses (10.96.0.0/16, kube-apiserver's
range for every local cluster) are host-wide: one pool runs on a machine at a time, and `up`
refuses a second one by name."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.realnodes.pool import Pool, RealNode

BRIDGE = re.compile(r"^gp\d+$")
# Bridged traffic passes the IPv4 hooks (br_netfilter): one set of silenced addresses drops a lost
# node's packets between pods, to and from the host.
LOST_RULES = """table inet {table} {{
  set lost {{ type ipv4_addr; flags interval; }}
  chain forward {{ type filter hook forward priority -10; ip saddr @lost drop; ip daddr @lost drop; }}
  chain input {{ type filter hook input priority -10; ip saddr @lost drop; }}
  chain output {{ type filter hook output priority -10; ip daddr @lost drop; }}
}}
"""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc


def bridges() -> list[str]:
    """The pools' bridges on this machine."""
    out = _ip("-o", "link", "show", "type", "bridge").stdout
    return [n for n in (line.split(":")[1].strip() for line in out.splitlines()) if BRIDGE.match(n)]


def up(pool: Pool) -> None:
    """The bridge with the host's address first (the CNI bridge plugin, as the pods' gateway,
    accepts a bridge whose first IPv4 address is its gateway) and the nodes' after it; forwarding
    on (the bridge plugin turns it on as the first pod starts anyway)."""
    net = pool.network
    others = [b for b in bridges() if b != net.bridge]
    if others:
        raise ClusterError(
            f"another real-node pool runs on this machine (bridge {', '.join(others)}): kube-proxy's rules "
            "and the Service addresses are host-wide, one pool at a time. Stop it (`make down` in its "
            "checkout, or the test that started it); a bridge left by a crash goes with "
            f"`ip link del {others[0]}`"
        )
    prefix = net.subnet.split("/")[1]
    if net.bridge not in bridges():
        _ip("link", "add", "name", net.bridge, "type", "bridge")
    have = _ip("-o", "-4", "addr", "show", "dev", net.bridge).stdout
    for address in (net.gateway, *(n.ip for n in pool.nodes)):
        if f" {address}/" not in have:
            _ip("addr", "add", f"{address}/{prefix}", "dev", net.bridge)
    _ip("link", "set", net.bridge, "up")
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1")
    _nft("delete", "table", "inet", table(pool), check=False)
    _nft("-f", "-", stdin=LOST_RULES.format(table=table(pool)))


def table(pool: Pool) -> str:
    return f"gangplugin-{pool.network.base}"


def _nft(*args: str, stdin: str | None = None, check: bool = True) -> None:
    proc = subprocess.run(["nft", *args], input=stdin, capture_output=True, text=True, check=False)
    if check and proc.returncode != 0:
        raise ClusterError(f"nft {' '.join(args)} failed: {proc.stderr.strip()}")


def _addresses(node: RealNode) -> str:
    return f"{{ {node.ip}, {node.pod_first}-{node.pod_last} }}"


def silence(pool: Pool, node: RealNode) -> None:
    """Drop every packet of `node` (its address and its pods'), before its processes are killed."""
    _nft("add", "element", "inet", table(pool), "lost", _addresses(node))


def unsilence(pool: Pool, node: RealNode) -> None:
    _nft("delete", "element", "inet", table(pool), "lost", _addresses(node), check=False)


def down(pool: Pool) -> None:
    """The bridge (its pods' veths went with their network namespaces) and kube-proxy's tables."""
    if pool.network.bridge in bridges():
        _ip("link", "del", pool.network.bridge, check=False)
    for family, name in (("ip", "kube-proxy"), ("ip6", "kube-proxy"), ("inet", table(pool))):
        _nft("delete", "table", family, name, check=False)
