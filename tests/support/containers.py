"""A Deployment's pod run as a container of gangplugin's image (podman, or Docker where an engine
answers: hack/container.sh): its args, env, volume mounts and securityContext read from the
Deployment, the ServiceAccount's token, CA and namespace at the in-cluster path, and
KUBERNETES_SERVICE_HOST/PORT at the local cluster's API server. Host networking stands in for pod
networking, so each listener moves to a port of its own on 127.0.0.1. Shared by the image test
(the kustomize base's Deployment) and the Helm test (the chart's, as installed)."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from gangplugin.localcluster.cluster import REPO

ENGINE = str(REPO / "hack" / "container.sh")
SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def engine(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ENGINE, *args], capture_output=True, text=True, check=False, timeout=timeout)


def build_image() -> str:
    """`make image`'s build (hack/image.sh): cached by content, so a warm run takes seconds."""
    out = subprocess.run(
        [str(REPO / "hack" / "image.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    assert out.returncode == 0, out.stderr[-4000:]
    return out.stdout.strip().splitlines()[-1]


def security_flags(pod_spec: dict[str, Any], container: dict[str, Any]) -> list[str]:
    """The engine flags for the pod's and the container's securityContext; a field this does not
    translate fails the test, so the manifest cannot gain one the containers here would ignore."""
    pod_sc = dict(pod_spec.get("securityContext") or {})
    sc = dict(container.get("securityContext") or {})
    assert pod_sc.pop("runAsNonRoot") is True and pod_sc["runAsUser"] != 0
    flags = [f"--user={pod_sc.pop('runAsUser')}:{pod_sc.pop('runAsGroup')}"]
    # RuntimeDefault is the engine's default seccomp profile: no flag.
    assert pod_sc.pop("seccompProfile") == {"type": "RuntimeDefault"}
    if sc.pop("allowPrivilegeEscalation") is False:
        flags.append("--security-opt=no-new-privileges")
    if sc.pop("readOnlyRootFilesystem") is True:
        flags.append("--read-only")
        if engine().stdout.strip() == "podman":  # else it adds writable /tmp, /run, /var/tmp
            flags.append("--read-only-tmpfs=false")
    caps = sc.pop("capabilities")
    assert set(caps) == {"drop"}, f"capabilities the image test does not apply: {caps}"
    flags += [f"--cap-drop={c}" for c in caps["drop"]]
    assert pod_sc == {} and sc == {}, f"securityContext fields the image test does not apply: {pod_sc} {sc}"
    return flags


def files(directory: Path, contents: Mapping[str, bytes]) -> Path:
    """A directory the container's non-root UID can read (as a Secret volume's files are)."""
    directory.mkdir(mode=0o755)
    for name, data in contents.items():
        (directory / name).write_bytes(data)
        (directory / name).chmod(0o644)
    return directory


def run_argv(
    deployment: dict[str, Any],
    image: str,
    name: str,
    namespace: str,
    ports: Mapping[str, int],
    secrets: Mapping[str, Mapping[str, bytes]],
    account: Mapping[str, bytes],
    apiserver_port: int,
    tmp_path: Path,
) -> list[str]:
    """The engine's `run` for pod `name` of `deployment`: each `--<listener>-bind` on 127.0.0.1 at
    `ports[listener]`, each Secret volume holding `secrets[secretName]` (its `items`, where it
    lists them), the ServiceAccount's `account` files (token, ca.crt, namespace)."""
    spec = deployment["spec"]["template"]["spec"]
    (container,) = spec["containers"]
    args = []
    for arg in container["args"]:
        m = re.fullmatch(r"--(\w+)-bind=0\.0\.0\.0:\d+", arg)
        args.append(f"--{m[1]}-bind=127.0.0.1:{ports[m[1]]}" if m else arg)
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(apiserver_port)}
    fields = {"metadata.name": name, "metadata.namespace": namespace}
    for var in container["env"]:
        env[var["name"]] = fields[var["valueFrom"]["fieldRef"]["fieldPath"]]
    mounts = []
    for vol_mount in container["volumeMounts"]:
        volume = next(v for v in spec["volumes"] if v["name"] == vol_mount["name"])
        if "emptyDir" in volume:
            size = volume["emptyDir"]["sizeLimit"].removesuffix("i").lower()
            mounts.append(f"--tmpfs={vol_mount['mountPath']}:rw,size={size}")
            continue
        secret = volume["secret"]
        assert secret["secretName"] in secrets, volume
        data = secrets[secret["secretName"]]
        if "items" in secret:
            data = {i["path"]: data[i["key"]] for i in secret["items"]}
        source = files(tmp_path / f"{name}-{vol_mount['name']}", data)
        mode = "ro" if vol_mount.get("readOnly") else "rw"
        mounts.append(f"--volume={source}:{vol_mount['mountPath']}:{mode}")
    sa = files(tmp_path / f"{name}-serviceaccount", account)
    mounts.append(f"--volume={sa}:{SA_DIR}:ro")
    return [
        "run",
        "--detach",
        f"--name={name}",
        "--network=host",
        *security_flags(spec, container),
        *mounts,
        *(f"--env={k}={v}" for k, v in env.items()),
        image,
        *args,
    ]


def keep_logs_and_remove(name: str, log: Path) -> None:
    logs = engine("logs", name)
    log.write_text(logs.stdout + logs.stderr)
    engine("rm", "--force", name)
