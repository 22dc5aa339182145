#!/usr/bin/env bash
# The container engine, as it works on this machine: `hack/container.sh <engine args>`.
# Docker when an engine answers (`docker info`), else podman (Debian's package), with what podman
# needs on a host like CI's: the runc runtime when present (crun refuses hybrid cgroup v1/v2
# hierarchies), the cgroupfs manager (no systemd session), an explicit storage driver, and for
# `build`/`run` open-file and process limits below the caller's hard limits (podman's defaults
# exceed them and are refused there).
#
#   GANGPLUGIN_ENGINE=docker|podman   choose instead of detecting
#   GANGPLUGIN_PODMAN_STORAGE=vfs     podman's storage driver (default overlay)
set -euo pipefail

engine="${GANGPLUGIN_ENGINE:-}"
if [[ -z "${engine}" ]]; then
  if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    engine=docker
  elif command -v podman >/dev/null 2>&1; then
    engine=podman
  else
    echo "container: no Docker engine answers (docker info) and podman is not installed;" \
      "start Docker, or install podman (apt-get install podman runc)" >&2
    exit 1
  fi
fi
if [[ $# -eq 0 ]]; then echo "${engine}"; exit 0; fi  # no arguments: say which engine

if [[ "${engine}" == docker ]]; then exec docker "$@"; fi

global=(--cgroup-manager cgroupfs --storage-driver "${GANGPLUGIN_PODMAN_STORAGE:-overlay}")
if command -v runc >/dev/null 2>&1; then global+=(--runtime runc); fi
sub="$1"; shift
case "${sub}" in
  build | run | create) exec podman "${global[@]}" "${sub}" --ulimit nofile=1024:1024 --ulimit nproc=1024:1024 "$@" ;;
  *) exec podman "${global[@]}" "${sub}" "$@" ;;
esac
