#!/usr/bin/env bash
# The laptop path: a kind cluster labelled like HyperPod, Kueue installed from its
# release manifests, fake GPUs advertised, the queues and the sample gang applied.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "${here}")"
source "${here}/versions.env"
for tool in docker kind kubectl; do
  command -v "${tool}" >/dev/null || { echo "kind-up: ${tool} is not on PATH; install it first" >&2; exit 1; }
done
docker info >/dev/null 2>&1 || { echo "kind-up: the Docker engine is not running" >&2; exit 1; }

have=$(kind version | awk '{print $2}')
[[ "${have}" == "${KIND_VERSION}" ]] ||
  echo "kind-up: kind ${have} here; checked with ${KIND_VERSION} (hack/versions.env)" >&2
if ! kind get clusters | grep -qx gangplugin; then
  # deploy/kind/cluster.yaml, with failCgroupV1: false where the host runs cgroup v1.
  config=$(mktemp)
  trap 'rm -f "${config}"' EXIT
  "${here}/kind-config.sh" >"${config}"
  kind create cluster --config "${config}" --image "${KIND_NODE_IMAGE}" --wait 120s
fi
# kind nodes have no GPUs: advertise each worker's as an extended resource, the
# documented way (a status patch), from its gangplugin.io/kind-gpus label.
kubectl get nodes -l gangplugin.io/kind-gpus -o jsonpath='{range .items[*]}{.metadata.name} {.metadata.labels.gangplugin\.io/kind-gpus}{"\n"}{end}' |
while read -r node gpus; do
  kubectl patch node "${node}" --subresource=status --type=merge \
    -p "{\"status\":{\"capacity\":{\"nvidia.com/gpu\":\"${gpus}\"}}}" >/dev/null
done
kubectl apply --server-side -f "https://github.com/kubernetes-sigs/kueue/releases/download/${KUEUE_VERSION}/manifests.yaml"
kubectl -n kueue-system rollout status deployment/kueue-controller-manager --timeout=180s
kubectl apply --server-side -f "${repo}/deploy/local/queues.yaml"
echo "kind cluster ready; kubectl context kind-gangplugin. Submit a gang: see README.md (kind path)"
