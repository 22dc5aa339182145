"""The images the real nodes load, made by hack/node-images.sh (cached by image ID) and recorded
in `<state>/real-nodes/images.json`: which archive each node's containerd imports, and the names
tests and users put in their manifests (the worker's, gangplugin's)."""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

from gangplugin.localcluster.errors import ClusterError
from gangplugin.localcluster.upstream import REPO

WORKER = "localhost/gangplugin-worker"
GANGPLUGIN = "localhost/gangplugin"
# hack/node-images.sh's name for it: the training-operator is told it before the images exist.
PYTORCH_INIT = "localhost/pytorch-init:busybox"
PYTORCH_INIT_TEMPLATE = REPO / "deploy" / "real-nodes" / "pytorch-init-template.yaml"
SCRIPT = REPO / "hack" / "node-images.sh"
# debootstrap and a pip install inside `make image` on a cold machine.
BUILD_TIMEOUT = 3600


@dataclass(frozen=True, slots=True)
class NodeImages:
    archives: dict[str, Path]  # image name -> OCI archive

    def named(self, repository: str) -> str:
        """The full name of the image of `repository` (its tag is its version or content hash)."""
        for name in self.archives:
            if name.rpartition(":")[0] == repository:
                return name
        raise ClusterError(f"no image of {repository} among the real nodes' ({', '.join(self.archives)})")

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({k: str(v) for k, v in self.archives.items()}, indent=2))

    @classmethod
    def read(cls, path: Path) -> NodeImages:
        try:
            return cls({k: Path(v) for k, v in json.loads(path.read_text()).items()})
        except (OSError, ValueError) as err:
            raise ClusterError(f"{path} is unreadable ({err}): start the real nodes again") from err


def build() -> NodeImages:
    """Build (or reuse) every image: hack/node-images.sh's progress goes to stderr."""
    proc = subprocess.run(
        [str(SCRIPT)], stdout=subprocess.PIPE, stderr=None, text=True, check=False, timeout=BUILD_TIMEOUT
    )
    if proc.returncode != 0:
        raise ClusterError(f"{SCRIPT} failed (its messages are above); fix the cause and start again")
    archives = {}
    for line in proc.stdout.splitlines():
        name, _, archive = line.partition(" ")
        archives[name] = Path(archive)
    return NodeImages(archives)
