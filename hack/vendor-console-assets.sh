#!/usr/bin/env bash
# The console's browser libraries, vendored: htmx and its server-sent-events extension at the
# versions hack/versions.env pins, from the npm registry, each tarball checked against its
# pinned integrity hash (sha512, as npm's lockfiles check it). The files are committed; nothing is
# fetched at run time, at build time or in CI. Run it after changing a pin, then commit.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=/dev/null
source hack/versions.env
out=gangplugin/console/static/vendor
work="$(mktemp -d)"
trap 'rm -rf "${work}"' EXIT

fetch() { # package version integrity file-in-tarball destination
  local pkg=$1 version=$2 integrity=$3 inner=$4 dest=$5 tgz="${work}/$1-$2.tgz"
  curl -fsSL "https://registry.npmjs.org/${pkg}/-/${pkg}-${version}.tgz" -o "${tgz}"
  local got="sha512-$(openssl dgst -sha512 -binary "${tgz}" | base64 -w0)"
  if [[ "${got}" != "${integrity}" ]]; then
    echo "vendor: ${pkg}@${version}: integrity ${got} is not the pinned ${integrity}" >&2
    exit 1
  fi
  tar -xzf "${tgz}" -C "${work}" "package/${inner}" "package/LICENSE"
  cp "${work}/package/${inner}" "${out}/${dest}"
  cp "${work}/package/LICENSE" "${out}/${dest%.min.js}.LICENSE"
  rm -rf "${work}/package"
}

rm -f "${out}"/*.js "${out}"/*.LICENSE
fetch htmx.org "${HTMX_VERSION}" "${HTMX_INTEGRITY}" dist/htmx.min.js "htmx-${HTMX_VERSION}.min.js"
fetch htmx-ext-sse "${HTMX_SSE_VERSION}" "${HTMX_SSE_INTEGRITY}" dist/sse.min.js "htmx-ext-sse-${HTMX_SSE_VERSION}.min.js"
(cd "${out}" && sha256sum -- *.js > SHA256SUMS)
echo "vendored into ${out}:"
cat "${out}/SHA256SUMS"
