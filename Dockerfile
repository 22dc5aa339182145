# gangplugin's image: `gangplugin serve` (and gangctl) as a non-root user. `make image` builds it.
# The base is pinned by tag; pin it by digest too (python:3.11-slim@sha256:...) where your
# registry policy asks for it. Both stages use the same base, so the venv's interpreter matches.
# Any Python 3.11 base with `python3 -m venv` works: where no registry is reachable, `make image`
# passes one built from Debian packages (hack/build-base-image.sh). So pip runs only in venvs
# (a distribution's own python3 refuses system-wide installs) and python is called python3.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Dependencies first, from pyproject.toml alone: a change to the source rebuilds only the last
# layer. The gRPC code is committed (gangplugin/api/gen/, checked against proto/ by a unit test),
# so the build needs nothing but pip and setuptools.
COPY pyproject.toml ./
RUN python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
open("/tmp/requirements.txt", "w").write("\n".join(p["dependencies"]))'
# pip-ca: an optional build secret, the CA bundle of a TLS-inspecting proxy between the build and
# the package index (`make image` passes the host's PIP_CERT); it never lands in a layer.
RUN --mount=type=secret,id=pip-ca if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && python3 -m venv /opt/venv && /opt/venv/bin/pip install -r /tmp/requirements.txt
COPY README.md ./
COPY gangplugin ./gangplugin
RUN --mount=type=secret,id=pip-ca if [ -s /run/secrets/pip-ca ]; then export PIP_CERT=/run/secrets/pip-ca; fi \
 && /opt/venv/bin/pip install --no-deps . \
 && /opt/venv/bin/gangplugin --version

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN groupadd --system --gid 65532 gangplugin \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --shell /usr/sbin/nologin gangplugin
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
# extender (HTTPS), gRPC API, health, webhook, web console (HTTPS; when its component runs)
EXPOSE 8443 8090 8081 9443 8444
ENTRYPOINT ["gangplugin"]
CMD ["serve"]
