#!/usr/bin/env bash
# The images the real nodes run (GANGPLUGIN_WITH=real-nodes), made here as `make image` makes
# gangplugin's (hack/container.sh: Docker, else podman) and saved as OCI archives, which each node's
# containerd loads (`ctr images import`): no registry is involved. Each is named as the cluster asks
# for it, so nothing is pulled:
#   registry.k8s.io/pause:<PAUSE_VERSION>             containerd's sandbox image (from bin/pause)
#   registry.k8s.io/coredns/coredns:<COREDNS_VERSION> the cluster DNS (from bin/coredns)
#   registry.k8s.io/kube-scheduler:<KUBERNETES_VERSION> the chart's second scheduler (bin/kube-scheduler)
#   localhost/pytorch-init:busybox                    the training-operator's init container (Debian's busybox)
#   localhost/gangplugin-worker:<content hash>        the training jobs' ranks (deploy/real-nodes/images/worker)
#   localhost/gangplugin:<version>                    gangplugin itself (`make image`)
# The binaries come from the cache hack/build-upstream.sh fills (cluster and nodes groups). An
# archive is kept under <cache>/node-images/ by image ID, so a warm run saves nothing again. The
# engine's output goes to <cache>/node-images/build.log (its end is shown on a failure).
# Prints one line per image: its name and its archive.
set -euo pipefail
cd "${BASH_SOURCE[0]%/*}/.."
source hack/versions.env
PYTORCH_INIT_IMAGE=localhost/pytorch-init:busybox  # gangplugin/localcluster/realnodes/images.py
cache="${GANGPLUGIN_CACHE:-${HOME}/.cache/gangplugin}"
bin="${cache}/bin"
out="${cache}/node-images"
engine=(hack/container.sh)
log() { echo "node-images: $*" >&2; }
die() { log "$*"; exit 1; }
mkdir -p "${out}"
build_log="${out}/build.log"
: >"${build_log}"
work=$(mktemp -d)
trap 'rm -rf "${work}"' EXIT
quiet() { # command...: its output into the build log, its end shown if it fails
  "$@" >>"${build_log}" 2>&1 || { tail -n 30 "${build_log}" >&2; die "failed: $* (log: ${build_log})"; }
}

save() { # image: its archive (saved once per image ID), printed with its name
  local image="$1" id archive
  id=$("${engine[@]}" image inspect --format '{{.Id}}' "${image}")
  id="${id#sha256:}"
  archive="${out}/$(echo "${image}" | tr '/:' '__')-${id:0:12}.oci.tar"
  if [[ ! -f "${archive}" ]]; then
    rm -f "${out}/$(echo "${image}" | tr '/:' '__')"-*.oci.tar  # older builds of the same name
    if [[ "$("${engine[@]}")" == podman ]]; then
      quiet "${engine[@]}" save --format oci-archive -o "${archive}.part" "${image}"
    else
      quiet "${engine[@]}" save -o "${archive}.part" "${image}"
    fi
    mv -f "${archive}.part" "${archive}"
    log "saved ${image}"
  fi
  echo "${image} ${archive}"
}

from_binary() { # image context-dir binary...: a Containerfile of deploy/real-nodes/images/ around binaries
  local image="$1" dir="$2" b ctx="${work}/$2"
  shift 2
  mkdir -p "${ctx}"
  cp "deploy/real-nodes/images/${dir}/Containerfile" "${ctx}/"
  for b in "$@"; do
    [[ -x "${bin}/${b}" ]] || die "${bin}/${b} is missing: run hack/build-upstream.sh cluster nodes"
    cp -L "${bin}/${b}" "${ctx}/${b}"
  done
  quiet "${engine[@]}" build -t "${image}" "${ctx}"
  save "${image}"
}

from_binary "registry.k8s.io/pause:${PAUSE_VERSION}" pause pause
from_binary "registry.k8s.io/coredns/coredns:${COREDNS_VERSION}" coredns coredns
from_binary "registry.k8s.io/kube-scheduler:${KUBERNETES_VERSION}" kube-scheduler kube-scheduler

# The training-operator's PyTorchJob init container: Debian's busybox-static, its applets linked.
init_ctx="${work}/pytorch-init"
mkdir -p "${init_ctx}/bin"
cp deploy/real-nodes/images/pytorch-init/Containerfile "${init_ctx}/"
# (apt's package lists may be missing on a fresh machine: fetched then.)
(cd "${work}" && { apt-get download busybox-static >>"${build_log}" 2>&1 ||
  { quiet apt-get update -qq && quiet apt-get download busybox-static; }; } &&
  dpkg-deb -x busybox-static_*.deb "${work}/busybox")
cp "${work}/busybox/bin/busybox" "${init_ctx}/bin/busybox"
for applet in sh seq nslookup sleep; do ln -s busybox "${init_ctx}/bin/${applet}"; done
quiet "${engine[@]}" build -t "${PYTORCH_INIT_IMAGE}" "${init_ctx}"
save "${PYTORCH_INIT_IMAGE}"

base=$(hack/build-base-image.sh 2>>"${build_log}" | tail -n 1)
worker_dir=deploy/real-nodes/images/worker
key=$(cat "${worker_dir}/Containerfile" "${worker_dir}/rank.py" <(echo "${base}") | sha256sum | cut -c1-12)
worker="localhost/gangplugin-worker:${key}"
if ! "${engine[@]}" image inspect "${worker}" >/dev/null 2>&1; then
  quiet "${engine[@]}" build --build-arg "BASE=${base}" -t "${worker}" "${worker_dir}"
fi
save "${worker}"

# gangplugin's own image as `make image` builds it, under a name with its registry host, so that
# containerd finds it as the chart names it (image.repository=localhost/gangplugin).
built=$(hack/image.sh 2>>"${build_log}" | tail -n 1) || { tail -n 30 "${build_log}" >&2; die "make image failed"; }
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
quiet "${engine[@]}" tag "${built}" "localhost/gangplugin:${version}"
save "localhost/gangplugin:${version}"
