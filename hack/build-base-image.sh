#!/usr/bin/env bash
# A Python 3.11 base image built from Debian packages, for machines that reach Debian's archive
# but no container registry (the Dockerfile's default base, python:3.11-slim, comes from one).
# Debian bookworm's python3 is 3.11, the version the image's venv and pyproject.toml expect.
# Cached by content like the upstream binaries: the key is the suite and the package list, kept
# as an engine image tag (localhost/gangplugin-base:<key>) and as an OCI archive under
# ~/.cache/gangplugin/base-image/, so a reset engine storage reloads it instead of rebuilding.
# Prints the image name on its last line.
#
#   GANGPLUGIN_CACHE=/path   another cache root (default ~/.cache/gangplugin)
#   DEBIAN_MIRROR=URL        the archive to bootstrap from (default: this machine's apt source)
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
suite=bookworm
# python3-venv brings ensurepip (the Dockerfile makes its venvs with it); ca-certificates as in
# the official image. No compiler: the image's wheels are all binary.
packages=(python3 python3-venv ca-certificates)
key="${suite}-$(printf '%s\n' "${suite}" "${packages[@]}" | sha256sum | cut -c1-12)"
image="localhost/gangplugin-base:${key}"
cache="${GANGPLUGIN_CACHE:-${HOME}/.cache/gangplugin}/base-image"
archive="${cache}/${key}.oci.tar"
engine=("${here}/container.sh")

log() { echo "build-base-image: $*" >&2; }
die() { log "$*"; exit 1; }

if "${engine[@]}" image exists "${image}" 2>/dev/null || "${engine[@]}" image inspect "${image}" >/dev/null 2>&1; then
  echo "${image}"; exit 0
fi
if [[ -f "${archive}" ]]; then
  log "loading ${archive}"
  "${engine[@]}" load -i "${archive}" >&2
  "${engine[@]}" image inspect "${image}" >/dev/null 2>&1 || die "${archive} holds no ${image}; delete it and run again"
  echo "${image}"; exit 0
fi

command -v debootstrap >/dev/null || die "debootstrap is needed to build ${image} (apt-get install debootstrap)"
[[ $(id -u) == 0 ]] || die "debootstrap needs root to build ${image}"
mirror="${DEBIAN_MIRROR:-}"
if [[ -z "${mirror}" ]]; then  # the archive apt uses here (deb822 sources, else sources.list)
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | grep -v security | head -1 || true)
  [[ -n "${mirror}" ]] || mirror=$(awk '$1 == "deb" && $0 !~ /security/ {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
  [[ -n "${mirror}" ]] || die "no Debian archive in this machine's apt sources; set DEBIAN_MIRROR"
fi

mkdir -p "${cache}"
work=$(mktemp -d "${cache}/rootfs.XXXXXX")
trap 'rm -rf "${work}"' EXIT
log "debootstrap ${suite} (${packages[*]}) from ${mirror}"
start=$(date +%s)
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" "${suite}" "${work}/root" "${mirror}" \
  >"${work}/debootstrap.log" 2>&1 || { tail -n 30 "${work}/debootstrap.log" >&2; die "debootstrap failed"; }
rm -rf "${work}/root/var/cache/apt/archives/"*.deb "${work}/root/var/lib/apt/lists/"* "${work}/root/var/log/"*
tar --numeric-owner -C "${work}/root" -c . |
  "${engine[@]}" import --change 'ENV LANG=C.UTF-8' --change 'CMD ["python3"]' - "${image}" >&2
"${engine[@]}" save --format oci-archive -o "${archive}.part" "${image}" >&2 2>/dev/null ||
  "${engine[@]}" save -o "${archive}.part" "${image}" >&2  # docker save writes its own format
mv -f "${archive}.part" "${archive}"
log "built ${image} in $(( $(date +%s) - start ))s"
echo "${image}"
