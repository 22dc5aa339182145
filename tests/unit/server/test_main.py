"""`gangplugin serve` refuses bad options before touching the cluster, naming the option."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gangplugin.server.main", "serve", "--kubeconfig=/nonexistent", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--leader-election-renew-deadline=20s"], "--leader-election-lease-duration"),
        (["--leader-election-retry-period=9s"], "--leader-election-renew-deadline"),
        (["--leader-election-lease-duration=soon"], "--leader-election-lease-duration"),
        (["--health-tls-cert=/tmp/x.crt"], "--health-tls-cert/--health-tls-key"),
        (["--extender-tls-cert=/tmp/x.crt"], "--extender-tls-cert/--extender-tls-key"),
        (["--webhook-tls-key=/tmp/x.key"], "--webhook-tls-cert/--webhook-tls-key"),
        (["--grpc-tls-cert=/tmp/x.crt"], "--grpc-tls-cert/--grpc-tls-key"),
        (["--log-format=xml"], "--log-format"),
        (["--extender-client-ca=/nonexistent/ca.crt"], "--extender-client-ca"),
        (["--extender-client-ca=" + __file__], "--extender-client-ca"),  # exists, but no TLS
    ],
)
def test_bad_options_exit_2_naming_the_option(args: list[str], named: str) -> None:
    proc = _serve(*args)
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
