#!/usr/bin/env bash
# `make kind-up`'s cluster config: deploy/kind/cluster.yaml, and, where the container engine's
# host runs cgroup v1, a kubeadm patch that gives every node's kubelet `failCgroupV1: false`:
# Kubernetes >= 1.35 refuses to start on cgroup v1 unless told, and kind (v0.33.0) only warns.
# The real nodes of the local cluster run the same kubelet with the same setting on this cgroup v1
# machine (docs/real-nodes.md).
#
#   hack/kind-config.sh [1|2]   the host's cgroup version; default: what the engine kind uses says
#                               (Docker, or podman with KIND_EXPERIMENTAL_PROVIDER=podman)
set -euo pipefail
cd "${BASH_SOURCE[0]%/*}/.."
version="${1:-}"
if [[ -z "${version}" ]]; then
  if [[ "${KIND_EXPERIMENTAL_PROVIDER:-docker}" == podman ]]; then
    version=$(podman info --format '{{.Host.CgroupsVersion}}')
  else
    version=$(docker info --format '{{.CgroupVersion}}')
  fi
fi
version="${version#v}"
[[ "${version}" == 1 || "${version}" == 2 ]] || { echo "kind-config: cgroup version '${version}' is neither 1 nor 2" >&2; exit 2; }
cat deploy/kind/cluster.yaml
if [[ "${version}" == 1 ]]; then
  cat <<'PATCH'
# Added by hack/kind-config.sh: the host runs cgroup v1.
kubeadmConfigPatches:
- |
  kind: KubeletConfiguration
  failCgroupV1: false
PATCH
fi
