# gangplugin's image: `gangplugin serve` (and gangctl) as a non-root user. `make image` builds it.
# The base is pinned by tag; pin it by digest too (python:3.11-slim@sha256:...) where your
# registry policy asks for it. Both stages use the same base, so the venv's interpreter matches.
ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proto ./proto
COPY gangplugin ./gangplugin
# The gRPC code is generated from proto/ here, never copied from a checkout: the generator and its
# type-stub plugin come with the versions pyproject.toml pins (grpcio-tools, mypy-protobuf), and
# live only in this stage.
RUN python -c 'import re, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; \
print("\n".join(d for d in p["dependencies"] + p["optional-dependencies"]["dev"] \
if re.match(r"(grpcio-tools|mypy-protobuf)==", d)))' > /tmp/generator-pins.txt
RUN pip install -r /tmp/generator-pins.txt \
 && python -m gangplugin.api.generate \
 && test -f gangplugin/api/gen/plans_pb2.py
RUN python -m venv /opt/venv && /opt/venv/bin/pip install . \
 && /opt/venv/bin/gangplugin --help >/dev/null

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/venv/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
RUN useradd --system --uid 65532 --user-group --no-create-home --shell /usr/sbin/nologin gangplugin
COPY --from=build /opt/venv /opt/venv
USER 65532:65532
# extender (HTTPS), gRPC API, health
EXPOSE 8443 8090 8081
ENTRYPOINT ["gangplugin"]
CMD ["serve"]
