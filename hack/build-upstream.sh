#!/usr/bin/env bash
# Build the pinned upstream programs from their Go modules into a cache keyed by
# version, outside the checkout, so every later run (a fresh clone included)
# reuses them. Prints the bin directory on its last line.
#
#   hack/build-upstream.sh            build what is missing
#   GANGPLUGIN_CACHE=/path ...        use another cache root (default ~/.cache/gangplugin)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "${here}/versions.env"

cache="${GANGPLUGIN_CACHE:-${HOME}/.cache/gangplugin}"
bin="${cache}/bin"
work="${cache}/build"
mkdir -p "${bin}" "${work}"

die() { echo "build-upstream: $*" >&2; exit 1; }
log() { echo "build-upstream: $*" >&2; }

# Go is needed only when something must be built: a warm cache works without it.
need_go() {
  command -v go >/dev/null 2>&1 ||
    die "no Go toolchain on PATH and $1 is not cached; install Go >= 1.26 (https://go.dev/doc/install) and run again"
}
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
export CGO_ENABLED=0

# A binary lives at ${bin}/<name>-<version>; a symlink <name> points at the pinned one.
have() { [[ -x "${bin}/$1-$2" ]]; }
publish() { # name version built-file
  mv -f "$3" "${bin}/$1-$2"
  ln -sfn "$1-$2" "${bin}/$1"
  log "built $1 $2"
}
relink() { ln -sfn "$1-$2" "${bin}/$1"; }

# Run a build step, and on failure say which module failed and show the tail of its log.
step() { # description log-file command...
  local what="$1" logf="$2"; shift 2
  if ! "$@" >"${logf}" 2>&1; then
    tail -n 30 "${logf}" >&2
    die "${what} failed (full log: ${logf})"
  fi
}

build_kubernetes() {
  local v="${KUBERNETES_VERSION}" sv="${KUBERNETES_STAGING_VERSION}"
  local names=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=0 n
  for n in "${names[@]}"; do have "$n" "$v" || missing=1; done
  if [[ ${missing} == 0 ]]; then for n in "${names[@]}"; do relink "$n" "$v"; done; return; fi

  need_go "Kubernetes ${v}"
  # k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging
  # module with a local path. A small module that requires it and pins each
  # staging module to the matching published version builds it as-is.
  local mod="${work}/kubernetes-${v}"
  mkdir -p "${mod}"
  log "resolving k8s.io/kubernetes ${v} (first time: downloads modules)"
  step "go mod download k8s.io/kubernetes@${v}" "${mod}/download.log" \
    go mod download -json "k8s.io/kubernetes@${v}"
  local gomod
  gomod="$(go env GOMODCACHE)/cache/download/k8s.io/kubernetes/@v/${v}.mod"
  [[ -f "${gomod}" ]] || die "k8s.io/kubernetes ${v}: go.mod not found at ${gomod}"
  {
    echo "module gangplugin.io/build/kubernetes"
    echo
    echo "go $(awk '/^go /{print $2; exit}' "${gomod}")"
    echo
    echo "require k8s.io/kubernetes ${v}"
    echo
    awk '/=> \.\/staging\/src\//{print $1}' "${gomod}" | sort -u | while read -r m; do
      echo "replace ${m} => ${m} ${sv}"
    done
  } >"${mod}/go.mod"
  cat >"${mod}/tools.go" <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
GO
  (cd "${mod}" && step "go mod tidy for k8s.io/kubernetes ${v}" "${mod}/tidy.log" go mod tidy -e)
  local minor="${v#v1.}"; minor="${minor%%.*}"
  local ld="-s -w" pkg key val
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for kv in "gitVersion=${v}" "gitMajor=1" "gitMinor=${minor}" "gitTreeState=clean" \
              "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
      key="${kv%%=*}"; val="${kv#*=}"
      ld+=" -X ${pkg}.${key}=${val}"
    done
  done
  for n in "${names[@]}"; do
    have "$n" "$v" && { relink "$n" "$v"; continue; }
    log "building $n ${v} (several minutes on 2 cores the first time)"
    (cd "${mod}" && step "go build $n ${v}" "${mod}/$n.log" \
      go build -ldflags "${ld}" -o "${mod}/$n.out" "k8s.io/kubernetes/cmd/$n")
    publish "$n" "$v" "${mod}/$n.out"
  done
}

build_required() { # name version package go: a main package built from a module requiring it
  # For modules `go install pkg@version` cannot build: etcd's server module replaces its
  # siblings with local paths; the proxy does not list sigs.k8s.io/jobset (it serves the version).
  local n="$1" v="$2" pkg="$3" gover="$4"
  if have "$n" "$v"; then relink "$n" "$v"; return; fi
  need_go "$n ${v}"
  local mod="${work}/$n-${v}"
  mkdir -p "${mod}"
  printf 'module gangplugin.io/build/%s\n\ngo %s\n\nrequire %s %s\n' "$n" "${gover}" "${pkg}" "$v" >"${mod}/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "${pkg}" >"${mod}/tools.go"
  log "building $n ${v}"
  (cd "${mod}" && step "go mod tidy for ${pkg} ${v}" "${mod}/tidy.log" go mod tidy -e)
  (cd "${mod}" && step "go build $n ${v}" "${mod}/build.log" \
    go build -ldflags "-s -w" -o "${mod}/$n.out" "${pkg}")
  publish "$n" "$v" "${mod}/$n.out"
}

build_install() { # name version package ldflags
  local n="$1" v="$2" pkg="$3" ld="$4"
  if have "$n" "$v"; then relink "$n" "$v"; return; fi
  need_go "$n ${v}"
  local out="${work}/$n-${v}"
  mkdir -p "${out}"
  log "building $n ${v}"
  step "go install ${pkg}@${v}" "${out}/build.log" \
    env GOBIN="${out}" go install -ldflags "${ld}" "${pkg}@${v}"
  publish "$n" "$v" "${out}/$(basename "${pkg}")"
}

upstream_manifests() { # name module version: its CRDs and webhook configuration, from its module
  local n="$1" m="$2" v="$3"
  local dst="${cache}/${n}-${v}"
  [[ -f "${dst}/.done" ]] && return
  need_go "${n} ${v} CRDs"
  step "go mod download ${m}@${v}" "${work}/${n}-download.log" go mod download "${m}@${v}"
  local src
  src="$(go env GOMODCACHE)/${m}@${v}/config/components"
  mkdir -p "${dst}"
  cp "${src}"/crd/bases/*.yaml "${dst}/" && chmod u+w "${dst}"/*.yaml
  cp "${src}/webhook/manifests.yaml" "${dst}/webhooks.yaml" && chmod u+w "${dst}/webhooks.yaml"
  touch "${dst}/.done"
}

build_required etcd "${ETCD_VERSION}" go.etcd.io/etcd/server/v3 1.26.0
build_kubernetes
build_install kueue "${KUEUE_VERSION}" sigs.k8s.io/kueue/cmd/kueue \
  "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
upstream_manifests kueue sigs.k8s.io/kueue "${KUEUE_VERSION}"
build_required jobset "${JOBSET_VERSION}" sigs.k8s.io/jobset 1.25.0
upstream_manifests jobset sigs.k8s.io/jobset "${JOBSET_VERSION}"
build_install kwok "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok \
  "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}"
build_install kwokctl "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwokctl \
  "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}"
echo "${bin}"
