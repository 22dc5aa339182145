#!/usr/bin/env bash
# Build the pinned upstream programs from their Go modules into a cache keyed by
# version, outside the checkout, so every later run (a fresh clone included)
# reuses them. Prints the bin directory on its last line.
#
#   hack/build-upstream.sh [cluster]  what the local cluster always starts (etcd, Kubernetes, Kueue
#                                     and JobSet at their default versions, kwok): `make up`
#   hack/build-upstream.sh extras     what some tests add: the newest Kueue and its JobSet, the job
#                                     controllers (training-operator, Trainer, LWS, KubeRay), helm
#   hack/build-upstream.sh nodes      the real nodes (GANGPLUGIN_WITH=real-nodes): kubelet, kube-proxy,
#                                     CoreDNS and pause; and kind (`make kind-up`'s config check)
#   hack/build-upstream.sh peers      the bench's peers: Volcano and KAI Scheduler (or one:
#                                     volcano, kai)
#   Groups combine (`make build` and CI: cluster extras); their builds share two lanes side by
#   side, and each builds only what the cache lacks.
#   GANGPLUGIN_CACHE=/path ...        use another cache root (default ~/.cache/gangplugin)
#   GANGPLUGIN_SHARED=/path ...       where peers/ is (default: shared/ beside the checkout)
#
# A binary lands in <cache>/bin/<name>-<version>, with a symlink <name> to the pinned default;
# an upstream's CRDs and webhook configurations in <cache>/<name>-<version>/.
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
# "building ..." starts a clock that "built ..." reports (wall and CPU seconds: on a busy
# machine the CPU time still says what a build costs), so a cold log says where the time went.
cpu() { # CPU seconds of the children this shell has waited for, into ${cpu_s}
  # in this shell: `times` in a subshell counts that subshell's children
  local f="${work}/.times.${BASHPID}"
  times >"${f}"
  cpu_s=$(awk 'NR == 2 { s = 0; for (i = 1; i <= NF; i++) { split($i, b, "m"); s += b[1] * 60 + b[2] }
    printf "%d", s }' "${f}")
  rm -f "${f}"
}
building() { started=${SECONDS}; cpu; started_cpu=${cpu_s}; log "building $*"; }

# Go is needed only when something must be built: a warm cache works without it.
need_go() { # what [minimum Go version, default 1.26]
  local want="${2:-1.26}" have_v
  command -v go >/dev/null 2>&1 ||
    die "no Go toolchain on PATH and $1 is not cached; install Go >= ${want} (https://go.dev/doc/install) and run again"
  have_v="$(go env GOVERSION)"; have_v="${have_v#go}"
  [[ "$(printf '%s\n%s\n' "${want}" "${have_v}" | sort -V | head -n1)" == "${want}" ]] ||
    die "$1 needs Go >= ${want}, and go on PATH is ${have_v}; install a newer Go (https://go.dev/doc/install) and run again"
}
# -s -w drop the binaries' DWARF at link time; -dwarf=false spares the compiler making it.
export GOFLAGS="${GOFLAGS:--buildvcs=false} -gcflags=all=-dwarf=false"
# The compiler's heap is short-lived: collecting it less saves CPU for memory this machine has.
# etcd cold (2026-12-01): 105-110 CPU s at GOGC=100, 80-92 s at 400; peak RSS 245-314 -> 383-388 MB.
export GOGC="${GOGC:-400}"
export CGO_ENABLED=0

have() { [[ -x "${bin}/$1-$2" ]]; }
relink() { ln -sfn "$1-$2" "${bin}/$1"; }
publish() { # name version built-file [nolink]: the symlink <name> is for the default version only
  mv -f "$3" "${bin}/$1-$2"
  [[ "${4:-}" == nolink ]] || relink "$1" "$2"
  cpu
  log "built $1 $2 ($((SECONDS - started)) s, CPU $((cpu_s - started_cpu)) s)"
}
# Keep the symlink of a cached default pointing at it (a version change moves it).
cached() { # name version [nolink]
  have "$1" "$2" || return 1
  [[ "${3:-}" == nolink ]] || relink "$1" "$2"
}

# Run a build step, and on failure say which module failed and show the tail of its log.
step() { # description log-file command...
  local what="$1" logf="$2"; shift 2
  if ! "$@" >"${logf}" 2>&1; then
    tail -n 30 "${logf}" >&2
    die "${what} failed (full log: ${logf})"
  fi
}

moddir() { # module version: download it and print where the module cache keeps its files
  local logf="${work}/download-${1//\//_}-$2.log"
  step "go mod download $1@$2" "${logf}" go mod download -json "$1@$2"
  sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' "${logf}"
}

# k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces every staging module with a
# local path. A small module that requires it (and whatever else is given) and pins each staging
# module to the matching published version builds it as-is.
kubernetes_module() { # dir require...: write dir/go.mod
  local mod="$1" v="${KUBERNETES_VERSION}" sv="${KUBERNETES_STAGING_VERSION}" gomod r
  shift
  mkdir -p "${mod}"
  log "resolving k8s.io/kubernetes ${v} (first time: downloads modules)"
  gomod="$(moddir k8s.io/kubernetes "${v}")/go.mod"
  [[ -f "${gomod}" ]] || die "k8s.io/kubernetes ${v}: go.mod not found at ${gomod}"
  {
    echo "module gangplugin.io/build/$(basename "${mod%-"${v}"}")"
    echo
    echo "go $(awk '/^go /{print $2; exit}' "${gomod}")"
    echo
    echo "require k8s.io/kubernetes ${v}"
    for r in "$@"; do echo "require ${r}"; done
    echo
    awk '/=> \.\/staging\/src\//{print $1}' "${gomod}" | sort -u | while read -r m; do
      echo "replace ${m} => ${m} ${sv}"
    done
  } >"${mod}/go.mod"
}

kubernetes_ldflags() { # the release stamped into /version and `--version` (else v0.0.0-master)
  local v="${KUBERNETES_VERSION}" minor pkg kv ld="-s -w"
  minor="${v#v1.}"; minor="${minor%%.*}"
  for pkg in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    for kv in "gitVersion=${v}" "gitMajor=1" "gitMinor=${minor}" "gitTreeState=clean" \
              "buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"; do
      ld+=" -X ${pkg}.${kv}"
    done
  done
  echo "${ld}"
}

build_kubernetes() {
  local v="${KUBERNETES_VERSION}"
  local names=(kube-apiserver kube-controller-manager kube-scheduler kubectl)
  local missing=() n
  for n in "${names[@]}"; do cached "$n" "$v" || missing+=("$n"); done
  ((${#missing[@]})) || return 0

  need_go "Kubernetes ${v}"
  local mod="${work}/kubernetes-${v}"
  kubernetes_module "${mod}"
  tools_go "${mod}" "${names[@]/#/k8s.io/kubernetes/cmd/}"
  (cd "${mod}" && step "go mod tidy for k8s.io/kubernetes ${v}" "${mod}/tidy.log" go mod tidy -e)
  # One `go build` for every missing binary: the shared packages compile once and
  # the (single-threaded) links overlap with compiling the next binary.
  building "${missing[*]} ${v} (about 10 minutes on 2 cores the first time)"
  rm -rf "${mod}/out" && mkdir -p "${mod}/out"
  (cd "${mod}" && step "go build ${missing[*]} ${v}" "${mod}/build.log" \
    go build -ldflags "$(kubernetes_ldflags)" -o "${mod}/out/" "${missing[@]/#/k8s.io/kubernetes/cmd/}")
  for n in "${missing[@]}"; do publish "$n" "$v" "${mod}/out/$n"; done
}

# The real nodes' programs (GANGPLUGIN_WITH=real-nodes): kubelet and kube-proxy of the same
# Kubernetes release, and CoreDNS, in one module and one `go build`. The module pins what the
# cluster group's does, so kubelet and kube-proxy reuse every package Go's build cache holds from
# it; CoreDNS's own requirements are all older than Kubernetes' (client-go v0.35.4, grpc
# v1.82.0, ...), so it builds against Kubernetes' and only its own packages compile. CoreDNS is
# built with the plugins a cluster's DNS uses (kubeadm's Corefile), as its plugin.cfg would
# select them: its full build compiles every cloud provider's SDK.
coredns_plugins=(cache errors forward health kubernetes loadbalance log loop metrics ready reload)

build_nodes() {
  local v="${KUBERNETES_VERSION}" cv="${COREDNS_VERSION}" missing=() n p
  build_pause
  # kind, for `make kind-up`'s config check (tests/e2e/test_kind_config.py): a module of its own,
  # whose few dependencies share nothing with the rest.
  build_install kind "${KIND_VERSION}" sigs.k8s.io/kind "-s -w"
  for n in kubelet kube-proxy; do cached "$n" "$v" || missing+=("$n"); done
  cached coredns "${cv}" || missing+=(coredns)
  ((${#missing[@]})) || return 0
  need_go "kubelet, kube-proxy and CoreDNS"
  local mod="${work}/nodes-${v}" pkgs=()
  kubernetes_module "${mod}" "github.com/coredns/coredns ${cv}"
  mkdir -p "${mod}/coredns"
  {
    printf '// CoreDNS %s with the plugins of hack/build-upstream.sh coredns_plugins.\npackage main\n\nimport (\n' "${cv}"
    for p in "${coredns_plugins[@]}"; do printf '\t_ "github.com/coredns/coredns/plugin/%s"\n' "$p"; done
    printf '\n\t"github.com/coredns/coredns/coremain"\n)\n\nfunc main() { coremain.Run() }\n'
  } >"${mod}/coredns/main.go"
  tools_go "${mod}" k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy
  (cd "${mod}" && step "go mod tidy for the real nodes' programs" "${mod}/tidy.log" go mod tidy -e)
  local sel
  sel="$(cd "${mod}" && go list -m -f '{{.Version}}' github.com/coredns/coredns)"
  [[ "${sel}" == "${cv}" ]] || die "the real nodes' module selects CoreDNS ${sel}, but hack/versions.env pins ${cv}"
  for n in "${missing[@]}"; do
    if [[ "$n" == coredns ]]; then pkgs+=(./coredns); else pkgs+=("k8s.io/kubernetes/cmd/$n"); fi
  done
  building "${missing[*]} (kubelet and kube-proxy ${v}, CoreDNS ${cv})"
  rm -rf "${mod}/out" && mkdir -p "${mod}/out"
  (cd "${mod}" && step "go build ${missing[*]}" "${mod}/build.log" \
    go build -ldflags "$(kubernetes_ldflags)" -o "${mod}/out/" "${pkgs[@]}")
  for n in "${missing[@]}"; do
    if [[ "$n" == coredns ]]; then publish coredns "${cv}" "${mod}/out/coredns"; else publish "$n" "$v" "${mod}/out/$n"; fi
  done
}

# The pod sandbox's program, from Kubernetes' own source (build/pause/linux/pause.c), compiled
# static as its Makefile does; the image around it is made by hack/node-images.sh.
build_pause() {
  local v="${PAUSE_VERSION}" dir src
  cached pause "$v" && return 0
  need_go "pause ${v}"
  command -v gcc >/dev/null || die "pause ${v} is built with gcc: apt-get install gcc libc6-dev"
  dir="$(moddir k8s.io/kubernetes "${KUBERNETES_VERSION}")/build/pause"
  grep -Eq "^TAG \?= ${v}\$" "${dir}/Makefile" ||
    die "Kubernetes ${KUBERNETES_VERSION}'s build/pause/Makefile is not at pause ${v}; pin the TAG it gives"
  src="${work}/pause-${v}"
  mkdir -p "${src}"
  building "pause ${v}"
  step "gcc pause.c" "${src}/build.log" \
    gcc -Os -Wall -Werror -static "-DVERSION=v${v}-gangplugin" -o "${src}/pause" "${dir}/linux/pause.c"
  publish pause "$v" "${src}/pause"
}

tools_go() { # dir package...: a file that imports each main package, so `go mod tidy` keeps their deps
  local dir="$1"; shift
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } >"${dir}/tools.go"
}

# Main packages built from a small module that requires the upstream one, for modules
# `go install pkg@version` cannot build: etcd's server module and Volcano replace
# their siblings with local paths; the proxy does not list sigs.k8s.io/jobset or
# sigs.k8s.io/lws (it serves their versions; `go install` reads the list for
# deprecations and stops). One `go build` for all of a module's binaries.
build_required() { # name version module [nolink] -- binary=package... ; go.mod extras on stdin
  local n="$1" v="$2" m="$3" link="" b missing=() pkgs=()
  shift 3
  [[ "$1" == nolink ]] && { link=nolink; shift; }
  [[ "$1" == -- ]] && shift
  for b in "$@"; do cached "${b%%=*}" "$v" "${link}" || missing+=("$b"); done
  local extra; extra="$(cat)"
  ((${#missing[@]})) || return 0
  need_go "$n ${v}"
  local mod="${work}/$n-${v}" gover
  mkdir -p "${mod}"
  gover="$(awk '/^go /{print $2; exit}' "$(moddir "$m" "$v")/go.mod")"
  printf 'module gangplugin.io/build/%s\n\ngo %s\n\nrequire %s %s\n%s\n' "$n" "${gover}" "$m" "$v" "${extra}" >"${mod}/go.mod"
  for b in "${missing[@]}"; do pkgs+=("${b#*=}"); done
  tools_go "${mod}" "${pkgs[@]}"
  building "${missing[*]%%=*} ${v}"
  (cd "${mod}" && step "go mod tidy for $m ${v}" "${mod}/tidy.log" go mod tidy -e)
  go_build "${mod}" "$n ${v}" "$v" "${link}" "-s -w" "${missing[@]}"
}

go_build() { # dir what version link ldflags binary=package...: build them in one go, then publish
  local dir="$1" what="$2" v="$3" link="$4" ld="$5" b
  shift 5
  local pkgs=()
  for b in "$@"; do pkgs+=("${b#*=}"); done
  rm -rf "${dir}/out" && mkdir -p "${dir}/out"
  if ((${#pkgs[@]} == 1)); then
    (cd "${dir}" && step "go build ${what}" "${dir}/build.log" go build -ldflags "${ld}" -o "${dir}/out/${1%%=*}" "${pkgs[0]}")
  else # -o dir/ names each binary after its package's last path element
    (cd "${dir}" && step "go build ${what}" "${dir}/build.log" go build -ldflags "${ld}" -o "${dir}/out/" "${pkgs[@]}")
    for b in "$@"; do [[ -e "${dir}/out/${b%%=*}" ]] || mv "${dir}/out/$(basename "${b#*=}")" "${dir}/out/${b%%=*}"; done
  fi
  for b in "$@"; do publish "${b%%=*}" "$v" "${dir}/out/${b%%=*}" "${link}"; done
}

# Several upstreams from one module that requires them all: minimal version selection
# keeps one version of each shared dependency (k8s.io/*, controller-runtime, ...), so
# those compile once rather than once per program. The pins must be the versions that
# selection keeps, which is checked.
build_together() { # set-name ldflags module@version... -- name:version:package[:nolink]...
  local set="$1" ld="$2" a mods=() bins=() missing=() n v p link
  shift 2
  while (($#)) && [[ "$1" != -- ]]; do mods+=("$1"); shift; done
  shift
  bins=("$@")
  for a in "${bins[@]}"; do
    IFS=: read -r n v p link <<<"${a}"
    cached "$n" "$v" "${link}" || missing+=("${a}")
  done
  ((${#missing[@]})) || return 0
  need_go "the ${set} set"
  local mod="${work}/${set}" pkgs=() sel
  mkdir -p "${mod}"
  {
    printf 'module gangplugin.io/build/%s\n\ngo 1.26.0\n\nrequire (\n' "${set}"
    for a in "${mods[@]}"; do printf '\t%s %s\n' "${a%@*}" "${a##*@}"; done
    printf ')\n'
  } >"${mod}/go.mod"
  for a in "${bins[@]}"; do IFS=: read -r n v p link <<<"${a}"; pkgs+=("$p"); done
  tools_go "${mod}" "${pkgs[@]}"
  (cd "${mod}" && step "go mod tidy for the ${set} set" "${mod}/tidy.log" go mod tidy -e)
  for a in "${mods[@]}"; do
    sel="$(cd "${mod}" && go list -m -f '{{.Version}}' "${a%@*}")"
    [[ "${sel}" == "${a##*@}" ]] ||
      die "the ${set} set needs ${a%@*} ${sel}, but hack/versions.env pins ${a##*@}; pin ${sel} (or build it apart)"
  done
  pkgs=()
  for a in "${missing[@]}"; do IFS=: read -r n v p link <<<"${a}"; pkgs+=("$p"); done
  building "${missing[*]%%:*} (the ${set} set)"
  rm -rf "${mod}/out" && mkdir -p "${mod}/out"
  (cd "${mod}" && step "go build for the ${set} set" "${mod}/build.log" \
    go build -ldflags "${ld}" -o "${mod}/out/" "${pkgs[@]}")
  for a in "${missing[@]}"; do
    IFS=: read -r n v p link <<<"${a}"
    [[ -e "${mod}/out/$n" ]] || mv "${mod}/out/$(basename "$p")" "${mod}/out/$n"
    publish "$n" "$v" "${mod}/out/$n" "${link}"
  done
}

build_install() { # name version package ldflags [nolink]
  local n="$1" v="$2" pkg="$3" ld="$4" link="${5:-}"
  cached "$n" "$v" "${link}" && return
  need_go "$n ${v}"
  local out="${work}/$n-${v}"
  mkdir -p "${out}"
  building "$n ${v}"
  step "go install ${pkg}@${v}" "${out}/build.log" \
    env GOBIN="${out}" go install -ldflags "${ld}" "${pkg}@${v}"
  publish "$n" "$v" "${out}/$(basename "${pkg}")" "${link}"
}

# An upstream's CRDs (and webhook configurations, and whatever else it needs
# applied) copied from its module into <cache>/<name>-<version>/.
manifests() { # name module version crd-dir [webhook-file [[?]other=dest...]]
  local n="$1" m="$2" v="$3" crds="$4" hooks="${5:-}" item path
  shift 5 || shift $#
  local dst="${cache}/${n}-${v}"
  [[ -f "${dst}/.done" ]] && return
  need_go "${n} ${v} CRDs"
  local src
  src="$(moddir "$m" "$v")"
  rm -rf "${dst}" && mkdir -p "${dst}"
  cp "${src}/${crds}"/*.yaml "${dst}/" && rm -f "${dst}/kustomization.yaml"
  [[ -z "${hooks}" ]] || cp "${src}/${hooks}" "${dst}/webhooks.yaml"
  for item in "$@"; do # ?path=dest: only where this version has it
    path="${item#\?}"; path="${path%%=*}"
    [[ "${item}" == \?* && ! -e "${src}/${path}" ]] && continue
    cp -R "${src}/${path}" "${dst}/${item#*=}"
  done
  chmod -R u+w "${dst}"
  touch "${dst}/.done"
}

# Kueue >= v0.19's MutatingAdmissionPolicy (clears a Workload's status.nominatedClusterNames
# when it is admitted or evicted), applied next to its CRDs.
kueue_policies="?config/components/map/manifests.yaml=admission-policies.yaml"

# Build units, one function each; a group is a list of them (below).
build_etcd() {
  build_required etcd "${ETCD_VERSION}" go.etcd.io/etcd/server/v3 -- etcd=go.etcd.io/etcd/server/v3 </dev/null
}

build_kueue() {
  build_install kueue "${KUEUE_VERSION}" sigs.k8s.io/kueue/cmd/kueue \
    "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_VERSION}"
  manifests kueue sigs.k8s.io/kueue "${KUEUE_VERSION}" config/components/crd/bases \
    config/components/webhook/manifests.yaml "${kueue_policies}"
}

build_jobset() {
  build_required jobset "${JOBSET_VERSION}" sigs.k8s.io/jobset -- jobset=sigs.k8s.io/jobset </dev/null
  manifests jobset sigs.k8s.io/jobset "${JOBSET_VERSION}" config/components/crd/bases \
    config/components/webhook/manifests.yaml
}

build_kwok() {
  local kwok_ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v} -X sigs.k8s.io/kwok/pkg/consts.KubeVersion=${KUBERNETES_VERSION#v}"
  build_install kwok "${KWOK_VERSION}" sigs.k8s.io/kwok/cmd/kwok "${kwok_ld}"
}

build_controllers() {
  # The newest Kueue and the controllers whose integrations it carries, at the versions
  # its go.mod requires (so Kueue's integrations meet the APIs they were built for), in
  # one set: they share k8s.io/* v0.36 and controller-runtime v0.24, compiled once.
  # The newest Kueue and its JobSet sit next to the defaults (no symlink): bin/kueue-v0.19.2.
  local tr=github.com/kubeflow/trainer/v2
  build_together controllers "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=${KUEUE_NEWEST_VERSION} -X sigs.k8s.io/lws/pkg/version.GitVersion=${LWS_VERSION}" \
    "sigs.k8s.io/kueue@${KUEUE_NEWEST_VERSION}" "sigs.k8s.io/jobset@${JOBSET_NEWEST_VERSION}" \
    "${tr}@${TRAINER_VERSION}" "sigs.k8s.io/lws@${LWS_VERSION}" -- \
    "kueue:${KUEUE_NEWEST_VERSION}:sigs.k8s.io/kueue/cmd/kueue:nolink" \
    "jobset:${JOBSET_NEWEST_VERSION}:sigs.k8s.io/jobset:nolink" \
    "trainer-controller-manager:${TRAINER_VERSION}:${tr}/cmd/trainer-controller-manager" \
    "lws:${LWS_VERSION}:sigs.k8s.io/lws/cmd"
  manifests kueue sigs.k8s.io/kueue "${KUEUE_NEWEST_VERSION}" config/components/crd/bases \
    config/components/webhook/manifests.yaml "${kueue_policies}"
  manifests jobset sigs.k8s.io/jobset "${JOBSET_NEWEST_VERSION}" config/components/crd/bases \
    config/components/webhook/manifests.yaml
  # runtimes/: the ClusterTrainingRuntimes a TrainJob names (torch-distributed, ...).
  manifests trainer "${tr}" "${TRAINER_VERSION}" manifests/base/crds manifests/base/webhook/manifests.yaml \
    manifests/base/runtimes=runtimes
  manifests lws sigs.k8s.io/lws "${LWS_VERSION}" config/crd/bases config/webhook/manifests.yaml
}

# KubeRay and training-operator do not compile against controller-runtime v0.24 (its
# NewWebhookManagedBy takes the object now): each is built with its own go.mod.
build_training_operator() {
  local to=github.com/kubeflow/training-operator
  build_install training-operator "${TRAINING_OPERATOR_VERSION}" "${to}/cmd/training-operator.v1" "-s -w"
  manifests training-operator "${to}" "${TRAINING_OPERATOR_VERSION}" manifests/base/crds \
    manifests/base/webhook/manifests.yaml
}

build_kuberay() {
  local kr=github.com/ray-project/kuberay/ray-operator
  build_install kuberay-operator "${KUBERAY_VERSION}" "${kr}" "-s -w"
  manifests kuberay "${kr}" "${KUBERAY_VERSION}" config/crd/bases config/webhook/manifests.yaml
}

build_helm() {
  build_install helm "${HELM_VERSION}" helm.sh/helm/v3/cmd/helm \
    "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION} -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
}

build_volcano() {
  local v="${VOLCANO_VERSION}" m=volcano.sh/volcano
  # Its go.mod replaces volcano.sh/apis with a local path the module zip does not
  # carry, and the proxy does not serve volcano.sh/apis ${v}: the module that requires
  # Volcano takes VOLCANO_APIS_VERSION instead and repeats Volcano's other replaces.
  local gomod_replaces=""
  if ! { cached vc-scheduler "$v" && cached vc-controller-manager "$v" && cached vc-webhook-manager "$v"; }; then
    need_go "Volcano ${v}"
    gomod_replaces="$(awk '/^replace \(/{r=1; next} r && /^\)/{r=0} r && /=>/ && !/=> *\.\//{print "replace " $0}' \
      "$(moddir "$m" "$v")/go.mod")"
    gomod_replaces+=$'\n'"replace volcano.sh/apis => volcano.sh/apis ${VOLCANO_APIS_VERSION}"
  fi
  build_required volcano "$v" "$m" -- \
    vc-scheduler="$m/cmd/scheduler" vc-controller-manager="$m/cmd/controller-manager" \
    vc-webhook-manager="$m/cmd/webhook-manager" <<<"${gomod_replaces}"
  # chart/: its webhook configurations are Helm templates (render with bin/helm).
  manifests volcano "$m" "$v" config/crd/volcano/bases "" config/crd/jobflow/bases=jobflow \
    installer/helm/chart/volcano=chart
}

build_kai() {
  local v="${KAI_SCHEDULER_VERSION}" n b
  # Every component its chart's operator runs, except the GPU-sharing and autoscaling ones.
  local comps=(scheduler binder podgrouper podgroupcontroller queuecontroller admission) missing=()
  for n in "${comps[@]}"; do cached "kai-$n" "$v" || missing+=("kai-$n=./cmd/$n"); done
  local dst="${cache}/kai-scheduler-${v}"
  ((${#missing[@]})) || [[ ! -f "${dst}/.done" ]] || return 0
  local tarball="${GANGPLUGIN_SHARED:-${here}/../../shared}/peers/kai-scheduler-${v}.tar.gz"
  [[ -f "${tarball}" ]] ||
    die "KAI Scheduler ${v}: ${tarball} not found (the module proxy does not serve it); set GANGPLUGIN_SHARED to the folder holding peers/"
  need_go "KAI Scheduler ${v}" 1.26.3
  local dir="${work}/kai-scheduler-${v}"
  if [[ ! -f "${dir}/src/go.mod" ]]; then
    rm -rf "${dir}/src" && mkdir -p "${dir}/src"
    tar -xzf "${tarball}" -C "${dir}/src" --strip-components=1
  fi
  if ((${#missing[@]})); then
    building "${missing[*]%%=*} ${v}"
    go_build "${dir}/src" "KAI Scheduler ${v}" "$v" "" "-s -w" "${missing[@]}"
  fi
  if [[ ! -f "${dst}/.done" ]]; then
    rm -rf "${dst}" && mkdir -p "${dst}"
    cp "${dir}/src/deployments/kai-scheduler/crds/"*.yaml "${dst}/"
    cp -R "${dir}/src/deployments/kai-scheduler" "${dst}/chart"
    touch "${dst}/.done"
  fi
}

# Each group's units with the CPU seconds each took cold (2026-12-01, 2 cores, two builds side by
# side): the weights that share them out below.
group_units() {
  case "$1" in
    cluster) echo etcd:120 kubernetes:1022 kueue:446 jobset:221 kwok:149 ;;
    extras) echo controllers:612 training_operator:218 kuberay:265 helm:160 ;;
    nodes) echo nodes:140 ;;  # after the cluster group (2026-12-03): kubelet, kube-proxy, CoreDNS 126, kind 10
    peers) echo kai:440 volcano:600 ;;
    volcano) echo volcano:600 ;;
    kai) echo kai:440 ;;
    *) return 1 ;;
  esac
}

groups=("$@")
((${#groups[@]})) || groups=(cluster)
units=()
for g in "${groups[@]}"; do
  u="$(group_units "$g")" || die "unknown group '$g': use cluster, extras, nodes, peers, volcano or kai (none: cluster)"
  read -ra us <<<"$u"
  units+=("${us[@]}")
done
# Two build lanes side by side, the heaviest unit first, each to the lane with less so far: a
# `go build` keeps 2 cores only part busy (one package's compile waits on its imports, links are
# single-threaded), and the lanes share no file but Go's caches, which take concurrent builds.
# Cold (2026-12-01), one after the other the `cluster` group alone took 1,220 s (all of it some
# 2,100 s); the two groups side by side 1,807 s, the `cluster` group last and alone.
# The real nodes' kubelet and kube-proxy compile mostly packages the Kubernetes build compiles: built
# side by side, both would compile them at once; after it, they come from Go's build cache. So
# when both are to be built, they are one unit, in that order.
if printf '%s\n' "${units[@]}" | grep -q '^kubernetes:' && printf '%s\n' "${units[@]}" | grep -q '^nodes:'; then
  k=$(printf '%s\n' "${units[@]}" | sed -n 's/^kubernetes://p' | head -1)
  n=$(printf '%s\n' "${units[@]}" | sed -n 's/^nodes://p' | head -1)
  mapfile -t units < <(printf '%s\n' "${units[@]}" | grep -v -e '^kubernetes:' -e '^nodes:')
  units+=("kubernetes+nodes:$((k + n))")
fi
lanes=("" "") load=(0 0)
while read -r unit; do
  [[ -n "${unit}" ]] || continue
  l=0; ((load[1] < load[0])) && l=1
  lanes[l]+=" ${unit%%:*}"; load[l]=$((load[l] + ${unit##*:}))
done < <(printf '%s\n' "${units[@]}" | sort -u | sort -t: -k2,2nr)
build_lane() { local u b; for u in "$@"; do for b in ${u//+/ }; do "build_$b"; done; done; }
pids=()
for l in 0 1; do
  read -ra us <<<"${lanes[l]}"
  ((${#us[@]})) || continue
  build_lane "${us[@]}" &
  pids+=($!)
done
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=1; done
((failed == 0)) || die "a build failed (its error is above)"
echo "${bin}"
