# The local control plane, the operator and the tests. Run `make help` for the list.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export KUBECONFIG ?= $(CURDIR)/.cluster/kubeconfig
# The local cluster's node: kwok (simulated, the default) or real (containerd, kubelet, NetworkPolicy).
NODE ?= $(or $(DEVCLUSTER_NODE),kwok)
export DEVCLUSTER_NODE := $(NODE)

.PHONY: help venv cluster-up cluster-down cluster-status crds operator test test-unit test-e2e lint bench demo dev

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# The three distributions (api/, client/, operator/), editable, plus the dev tools and devcluster's needs.
$(VENV)/.installed: api/pyproject.toml client/pyproject.toml operator/pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e './api[codegen]' -e './client[agent-sandbox]' -e ./operator -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed ## create the virtualenv: the three packages (editable) and the dev tools

demo: venv ## the quick start: control plane + operator + a deep agent in a sandbox, then tear down
	$(PY) -m examples.demo_agent

dev: venv ## like demo, but leave the control plane running
	$(PY) -m examples.demo_agent --keep

cluster-up: venv ## start the local control plane (NODE=kwok|real; builds binaries once; writes .cluster/kubeconfig)
	$(PY) -m devcluster up

cluster-down: venv ## stop the local control plane
	$(PY) -m devcluster down

cluster-status: venv ## is the local control plane running?
	$(PY) -m devcluster status

crds: venv ## regenerate crds/*.yaml from the API types
	$(PY) -m agentsession_api.crdgen
	$(PY) -m agentsession_api.apidoc
	cp crds/agentsession.dev_*.yaml charts/agentsession/crds/  # Helm installs crds/ verbatim

operator: venv ## install the CRDs and run the operator in the foreground against $$KUBECONFIG
	$(PY) -m devcluster kubectl apply --server-side --force-conflicts -f crds/
	$(PY) -m agentsession_operator

test-unit: venv ## unit tests (no cluster)
	$(PY) -m pytest tests/unit -q

test-e2e: venv ## end-to-end tests on the local control plane (started and stopped by the tests)
	$(PY) -m devcluster build
	$(PY) -m pytest tests/e2e -q

test: venv ## every test: unit first, then end to end (builds the control plane first if needed)
	$(PY) -m pytest tests/unit -q
	$(PY) -m devcluster build
	$(PY) -m pytest tests/integration tests/e2e -q

lint: venv ## ruff, mypy and shellcheck (the scripts the client runs in the pod, and ours)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy devcluster api/agentsession_api client/langchain_k8s_client operator/agentsession_operator
	cd client/langchain_k8s_client/scripts && shellcheck -x *.sh
	shellcheck kind/*.sh .ci/run

bench: venv ## benchmarks (print tables of medians and ratios)
	$(PY) -m benchmarks.bench_cluster
	$(PY) -m benchmarks.bench_operator
	$(PY) -m benchmarks.bench_transport
	$(PY) -m benchmarks.bench_scale
