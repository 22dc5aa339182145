# gangplugin — the commands a developer and CI run. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pytest's exit 5 (no tests collected) is a failure here, never a pass.
PYTEST := $(PY) -m pytest

.PHONY: help venv proto build up down status test test-unit test-e2e lint fmt bench image kind-up kind-down clean

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml $(wildcard proto/gangplugin/v1/*.proto)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	$(PY) -m gangplugin.api.generate
	@touch $@

venv: $(VENV)/.installed ## create .venv with gangplugin and its dev tools

proto: $(VENV)/.installed ## generate the gRPC Python code from proto/ into gangplugin/api/gen/
	$(PY) -m gangplugin.api.generate

build: ## build (or reuse from ~/.cache/gangplugin) the pinned upstream binaries the tests use
	hack/build-upstream.sh cluster extras >/dev/null

up: venv ## start the local cluster with Kueue and fake nodes, and run the sample gang
	$(PY) -m gangplugin.localcluster up

down: venv ## stop the local cluster; leaves no process behind
	$(PY) -m gangplugin.localcluster down

status: venv ## show whether the local cluster runs
	$(PY) -m gangplugin.localcluster status

test: venv build ## every test: lint, unit and e2e (starts the local cluster unless KUBECONFIG is set)
	$(MAKE) lint
	@$(PYTEST) tests; rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; exit 1; fi; \
	  exit $$rc

test-unit: venv ## unit tests only
	$(PYTEST) tests/unit

test-e2e: venv build ## e2e tests only
	$(PYTEST) tests/e2e

lint: venv ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

fmt: venv ## format the code
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

bench: venv ## run every benchmark in bench/ and print its table
	@for f in bench/[!_]*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

# `make image` tags the image gangplugin:<version in pyproject.toml>; IMAGE=registry/name:tag overrides.
image: ## build the container image gangplugin:<version> (Docker, else podman; see hack/image.sh)
	IMAGE="$(IMAGE)" hack/image.sh >/dev/null

kind-up: ## the laptop path with Docker: a kind cluster with HyperPod-like labels, plus Kueue
	hack/kind-up.sh

kind-down: ## delete the kind cluster
	kind delete cluster --name gangplugin

clean: down ## stop the cluster and remove local state (the binary cache stays)
	rm -rf .local
