#!/usr/bin/env bash
# `make image`: build gangplugin:<version> (or $IMAGE) from ./Dockerfile with the engine that
# works here (hack/container.sh: Docker when an engine answers, else podman). The base is the
# Dockerfile's default (the public Python image) when the engine has it or can pull it; where no
# registry is reachable, one built from Debian packages (hack/build-base-image.sh, cached).
# Prints the image name on its last line.
#
#   PYTHON_IMAGE=...   the base to use, without trying anything else
set -euo pipefail
cd "${BASH_SOURCE[0]%/*}/.."
engine=(hack/container.sh)
name=$("${engine[@]}")  # fails here, saying what to install, when there is no engine
version=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
image="${IMAGE:-gangplugin:${version}}"
log() { echo "image: $*" >&2; }

base="${PYTHON_IMAGE:-}"
if [[ -z "${base}" ]]; then
  default=$(sed -n 's/^ARG PYTHON_IMAGE=//p' Dockerfile)
  if "${engine[@]}" image inspect "${default}" >/dev/null 2>&1 || "${engine[@]}" pull "${default}" >/dev/null 2>&1; then
    base="${default}"
  else
    log "${default} cannot be pulled here; using a base built from Debian packages"
    base=$(hack/build-base-image.sh | tail -n 1)
  fi
fi
log "building ${image} on ${base} with ${name}"
start=$(date +%s)
# Host networking: pip inside the build reaches the package index the way this host does, and
# trusts the CA bundle this host's pip is told to (a TLS-inspecting proxy's), as a build secret.
flags=(--network host --build-arg "PYTHON_IMAGE=${base}")
ca="${PIP_CERT:-$(pip3 config get global.cert 2>/dev/null || true)}"
if [[ -n "${ca}" && -s "${ca}" ]]; then flags+=(--secret "id=pip-ca,src=${ca}"); fi
"${engine[@]}" build "${flags[@]}" -t "${image}" . >&2
log "built ${image} in $(( $(date +%s) - start ))s"
echo "${image}"
