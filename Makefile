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
	hack/build-upstream.sh cluster extras >/dev/null

up: venv ## start the local cluster with Kueue and fake nodes, and run the sample gang
	$(PY) -m gangplugin.localcluster up

down: venv ## stop the local cluster; leaves no process behind
	$(PY) -m gangplugin.localcluster down

status: venv ## show whether the local cluster runs
	$(PY) -m gangplugin.localcluster status

# The full e2e suite runs on the newest supported Kueue (tests/e2e/conftest.py); the compatibility
# set (tests marked `compat`) then runs on the oldest, in a session of its own on its own local
# cluster, 1,000 ports above the first. Against a cluster KUBECONFIG names there is one Kueue: no
# second session. tests/e2e/test_multikueue.py starts three control planes of its own (a MultiKueue
# manager and two workers: about 3 GiB and 3.5 to 6 minutes on 2 cores): it runs on its own, last,
# so no other cluster is up by then.
MULTIKUEUE_E2E := tests/e2e/test_multikueue.py
OLDEST_KUEUE := $(shell sed -n 's/^KUEUE_VERSION=//p' hack/versions.env)
E2E_PORT_BASE := $(or $(GANGPLUGIN_E2E_PORT_BASE),23000)
define pytest_run
	@$(1) $(PYTEST) $(2); rc=$$?; \
	  if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests; that is a failure" >&2; exit 1; fi; \
	  exit $$rc
endef

test: venv build ## every test: lint, unit, e2e, e2e's compat set on the oldest Kueue, MultiKueue (a local cluster unless KUBECONFIG is set)
	$(MAKE) lint
	$(call pytest_run,,tests --ignore=$(MULTIKUEUE_E2E))
ifeq ($(KUBECONFIG),)
	$(call pytest_run,GANGPLUGIN_KUEUE_VERSION=$(OLDEST_KUEUE) GANGPLUGIN_E2E_PORT_BASE=$(shell echo $$(($(E2E_PORT_BASE) + 1000))),-m compat tests/e2e --ignore=$(MULTIKUEUE_E2E))
else
	@echo "make test: KUBECONFIG names the cluster (one Kueue): the compat set ran with the full suite"
endif
	$(call pytest_run,,$(MULTIKUEUE_E2E))

test-unit: venv ## unit tests only
	$(PYTEST) tests/unit

test-e2e: venv build ## e2e tests only (on the newest Kueue; GANGPLUGIN_KUEUE_VERSION picks another)
	$(PYTEST) tests/e2e --ignore=$(MULTIKUEUE_E2E)
	$(PYTEST) $(MULTIKUEUE_E2E)

test-compat: venv build ## e2e's compat set on the oldest supported Kueue
	GANGPLUGIN_KUEUE_VERSION=$(OLDEST_KUEUE) $(PYTEST) -m compat tests/e2e

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
