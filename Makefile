# gangplugin — the commands a developer and CI run. `make help` lists them.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# pytest's exit 5 (no tests collected) is a failure here, never a pass.
PYTEST := $(PY) -m pytest

.PHONY: help venv proto manifests build up down status test test-unit test-e2e test-compat lint fmt bench image kind-up kind-down clean

help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $@

venv: $(VENV)/.installed ## create .venv with gangplugin and its dev tools

proto: $(VENV)/.installed ## regenerate the committed gRPC code in gangplugin/api/gen/ from proto/
	$(PY) -m gangplugin.api.generate

manifests: venv ## render deploy/manifests (kustomize base, scheduler Component) from the Helm chart
	$(PY) hack/render-manifests.py

build: ## build (or reuse from ~/.cache/gangplugin) the pinned upstream binaries the tests use
	hack/build-upstream.sh cluster extras nodes >/dev/null

up: venv ## start the local cluster with Kueue and fake nodes, and run the sample gang
	$(PY) -m gangplugin.localcluster up

down: venv ## stop the local cluster; leaves no process behind
	$(PY) -m gangplugin.localcluster down

status: venv ## show whether the local cluster runs
	$(PY) -m gangplugin.localcluster status

# Lint, then hack/test.sh: the unit tests and the full e2e suite on the newest supported Kueue
# (tests/support/cluster.py), split in two lanes, and beside them a third: the compatibility set
# (tests marked `compat`) on the oldest Kueue, then the soak and tests/e2e/test_multikueue.py's
# three control planes; and a fourth: the real nodes. Each lane is a pytest session on a local
# cluster of its own; against a cluster KUBECONFIG names, one session runs everything.
MULTIKUEUE_E2E := tests/e2e/test_multikueue.py
# The real-node cluster takes the session's ports: a session of its own.
REAL_NODES_E2E := tests/e2e/test_real_nodes.py
OLDEST_KUEUE := $(shell sed -n 's/^KUEUE_VERSION=//p' hack/versions.env)

test: venv build ## every test: lint, unit, e2e, e2e's compat set on the oldest Kueue, MultiKueue, the real nodes (local clusters unless KUBECONFIG is set)
	$(MAKE) lint
	PY=$(PY) hack/test.sh

test-unit: venv ## unit tests only
	$(PYTEST) tests/unit

test-e2e: venv build ## e2e tests only (on the newest Kueue; GANGPLUGIN_KUEUE_VERSION picks another)
	$(PYTEST) tests/e2e --ignore=$(MULTIKUEUE_E2E) --ignore=$(REAL_NODES_E2E)
	$(PYTEST) $(MULTIKUEUE_E2E)
	$(PYTEST) $(REAL_NODES_E2E)

test-compat: venv build ## e2e's compat set on the oldest supported Kueue
	GANGPLUGIN_KUEUE_VERSION=$(OLDEST_KUEUE) $(PYTEST) -m compat tests/e2e --ignore=$(REAL_NODES_E2E)

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
