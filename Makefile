# The local control plane, the operator and the tests. Run `make help` for the list.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export KUBECONFIG ?= $(CURDIR)/.cluster/kubeconfig
# The local cluster's node: kwok (simulated, the default) or real (containerd, kubelet, NetworkPolicy).
NODE ?= $(or $(DEVCLUSTER_NODE),kwok)
export DEVCLUSTER_NODE := $(NODE)

.PHONY: release help venv cluster-up cluster-down cluster-status crds operator test test-full test-unit test-lowest test-ts test-e2e test-faults test-hostile install uninstall lint bench demo dev

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-16s %s\n", $$1, $$2}'

# The four distributions (api/, client/, operator/, nodeagent/), editable, plus the dev tools and devcluster's needs.
$(VENV)/.installed: api/pyproject.toml client/pyproject.toml operator/pyproject.toml nodeagent/pyproject.toml requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	@# setuptools prints an "information only" box of asterisks per editable package (its import finder's
	@# generic caveat); nothing to act on, and four of them bury a newcomer's progress lines.
	PYTHONWARNINGS="ignore:Editable installation" \
	  $(VENV)/bin/pip install -q -e './api[codegen]' -e './client[agent-sandbox]' -e ./operator -e ./nodeagent -r requirements-dev.txt
	touch $@

venv: $(VENV)/.installed ## create the virtualenv: the four packages (editable) and the dev tools

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

crds: venv ## regenerate crds/*.yaml (and the TypeScript contract and protocol, the sync transport) from their sources
	$(PY) -m agentsession_api.crdgen
	$(PY) -m agentsession_api.apidoc
	$(PY) -m agentsession_api.tsgen  # the TypeScript client's contract (client-ts/src/generated)
	$(PY) -m agentsession_api.viewgen  # the read-only views of the specs the operator decides over
	$(PY) -m langchain_k8s_client.protocol_tsgen  # and its in-pod protocol (client-ts/src/generated/protocol.ts)
	$(PY) -m langchain_k8s_client.http11_unasync  # the pod transport's sync twin (http11_sync.py) from http11_async.py
	cp crds/agentsession.dev_*.yaml charts/agentsession/crds/  # Helm installs crds/ verbatim

# REPLICAS=2: a leader and a hot standby (one Lease); each further replica on ports +10 (metrics, health, webhook).
REPLICAS ?= 1
operator: venv ## install the CRDs and run the operator in the foreground against $$KUBECONFIG (REPLICAS=n)
	$(PY) -m devcluster kubectl apply --server-side --force-conflicts -f crds/
	@# The webhook configuration the operator patches (created once: it then holds the operator's URL and CA).
	@$(PY) -m devcluster kubectl create -f config/webhook/validating_webhook_configuration.yaml 2>/dev/null || true
	@trap 'kill $$(jobs -p) 2>/dev/null' EXIT INT TERM; \
	for i in $$(seq 2 $(REPLICAS)); do \
	  $(PY) -m agentsession_operator --metrics-port $$((8070 + 10 * i)) --health-port $$((8071 + 10 * i)) \
	    --webhook-port $$((9433 + 10 * i)) & \
	done; \
	$(PY) -m agentsession_operator

# The TypeScript client: `npm ci` once per lock file (the stamp), then its unit tests (they run the
# Python client too, for the byte-identical scripts: hence venv).
client-ts/node_modules/.installed: client-ts/package-lock.json
	$(PY) -m devcluster.prereqs node
	@node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 20 ? 0 : 1)' || \
	  { echo "the TypeScript client needs Node.js 20 or newer, found $$(node --version)"; exit 1; }
	cd client-ts && npm ci --no-audit --no-fund
	touch $@

test-ts: venv client-ts/node_modules/.installed ## the TypeScript client's unit tests (npm test; no cluster)
	cd client-ts && CROSS_LANGUAGE=required PYTHON=$(CURDIR)/$(PY) npm test

test-unit: venv ## unit tests (no cluster)
	$(PY) -m devcluster.prereqs ops shells  # lua5.1 and promtool (the operations kit), busybox and dash
	$(PY) -m pytest tests/unit -q

test-lowest: venv ## the unit tests with every dependency at the lowest version the packages declare (uv --resolution lowest-direct)
	$(PY) -m tests.lowest_deps

test-e2e: venv ## end-to-end tests on one kind of node (NODE=kwok|real; the tests start and stop the cluster)
	$(PY) -m devcluster build
	$(PY) -m pytest tests/e2e -q

test-faults: venv ## only the fault-injection e2e tests (failover, restarts, SIGKILLs; docs/reliability.md)
	$(PY) -m devcluster build
	$(PY) -m pytest -m faults tests/e2e -q

test-hostile: venv ## only the hostile-input e2e tests (malformed manifests, hostile paths and commands; docs/reliability.md)
	$(PY) -m devcluster build
	$(PY) -m pytest -m hostile tests/e2e -q

# make test: what proves the product works, within CI's 40 minutes. Control-plane tests (the API server,
# the webhook, the operator: the same processes on both nodes) run once, on the kwok node; tests whose
# outcome depends on the node (marked `node` or `realnode`: pods, runtime, network) on the real node, and
# those marked `bothnodes` (the client's conformance, the README's blocks: what make demo runs) on the kwok
# node too. The long ones (marked `slow`: the upgrade, the slow faults, the full gVisor limits) and the kwok
# node's run of the other `node` tests only in make test-full.
# Each stage's counts and time: .cluster/stages.tsv (python -m tests.stage --summary).
STAGE := $(PY) -m tests.stage
KWOK_TESTS ?= not realnode and not slow and (not node or bothnodes)
REAL_TESTS ?= (realnode or node) and (not faults or realfaults) and not slow

test: venv client-ts/node_modules/.installed ## every test that proves the product: unit, then end to end on the kwok node, then the node-dependent ones on the real node
	@$(if $(STAGES_KEEP),,$(STAGE) --reset)
	$(PY) -m devcluster.prereqs ops shells  # lua5.1 and promtool (the operations kit), busybox and dash
	$(STAGE) unit -- $(PY) -m pytest tests/unit -q
	$(STAGE) lowest-deps -- $(PY) -m tests.lowest_deps
	$(STAGE) client-ts -- sh -c 'cd client-ts && CROSS_LANGUAGE=required PYTHON=$(CURDIR)/$(PY) npm test'
	$(PY) -m devcluster.prereqs kwok real-node images  # every host package before any long build
	$(STAGE) build-kwok -- env DEVCLUSTER_NODE=kwok $(PY) -m devcluster build
	$(STAGE) build-real -- env DEVCLUSTER_NODE=real $(PY) -m devcluster build
	$(STAGE) e2e-kwok -- env DEVCLUSTER_NODE=kwok $(PY) -m pytest tests/integration tests/e2e -q --durations=30 -m "$(KWOK_TESTS)"
	$(STAGE) e2e-real -- env DEVCLUSTER_NODE=real $(PY) -m pytest tests/e2e -q --durations=30 -m "$(REAL_TESTS)"
	@$(STAGE) --summary

test-full: ## make test plus the long tests (marked slow: upgrade, slow faults, full gVisor limits); run it before resolving an issue that touches them
	$(MAKE) test KWOK_TESTS="not realnode" REAL_TESTS="(realnode or node) and (not faults or realfaults)"

release: venv client-ts/node_modules/.installed ## every artifact users install from, into dist/: wheels and sdists, the npm package, the operator image (OCI archive), one install manifest, the chart
	$(PY) -m devcluster.prereqs images  # buildah, skopeo: the image
	$(PY) -m devcluster.release --out dist

install: venv ## on a running real-node cluster: build the operator's image, push it, kubectl apply -k config/
	$(PY) -m devcluster install

uninstall: venv ## remove what make install applied
	$(PY) -m devcluster uninstall

lint: venv client-ts/node_modules/.installed ## ruff, mypy, shellcheck and tsc (the scripts the client runs in the pod, and ours)
	$(PY) -m devcluster.prereqs lint  # shellcheck: installed as root on Debian, else one line naming it
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy devcluster testkit api/agentsession_api client/langchain_k8s_client operator/agentsession_operator nodeagent/agentsession_nodeagent benchmarks
	cd client/langchain_k8s_client/scripts && shellcheck -x *.sh
	cd client-ts && npm run --silent copy-scripts && npx tsc -p tsconfig.json --noEmit
	shellcheck kind/*.sh .ci/run client/krew/kubectl-agentsession

# The scale points (live sessions; cumulative, one operator): up to 10,000 about 50 minutes on the
# shared 2 cores of docs/performance.md, claims created directly in every other round.
SCALE_POINTS ?= 100,1000,5000,10000
SHARD_SESSIONS ?= 10000
RESTART_SESSIONS ?= 10000
WAITING_POINTS ?= 5000,20000,60000

bench: venv ## benchmarks (print tables of medians and ratios; installs benchmarks/requirements.txt)
	$(VENV)/bin/pip install -q -r benchmarks/requirements.txt  # langchain-k8s (compared with) and matplotlib
	$(PY) -m benchmarks.bench_cluster
	$(PY) -m benchmarks.bench_base --rounds 5  # the operator's base in an empty cluster, as its image installs it (before any session)
	$(PY) -m benchmarks.bench_client
	$(PY) -m benchmarks.bench_ts_client  # client-ts against Node's raw POST (builds client-ts)
	$(PY) -m benchmarks.bench_operator --rounds 25
	$(PY) -m benchmarks.bench_webhook_connection --rounds 9  # a TLS handshake per admission review (Connection: close)
	$(PY) -m benchmarks.bench_claim_pin --points 100,1000,4000 --rounds 5 --creates 20  # the opt-in claim-conformity pin: a check per session of the namespace
	DEVCLUSTER_NODE=real $(PY) -m benchmarks.bench_first_call --rounds 24  # real node only (its NetworkPolicies; root)
	DEVCLUSTER_NODE=real $(PY) -m benchmarks.bench_router --rounds 30  # the router with per-session credentials vs the pod IP (real node)
	$(PY) -m benchmarks.bench_restart --sessions $(RESTART_SESSIONS) --rounds 3  # a fresh operator taking over 10,000 live sessions
	$(PY) -m benchmarks.bench_restart --waiting --sessions 2000 --rounds 3  # ... over 2,000 sessions waiting on a missing pool
	$(PY) -m benchmarks.bench_handover --sessions 10000 --rounds 3 --sample 100 --window 10  # deadlines while the leader hands over
	$(PY) -m benchmarks.bench_waiting --points $(WAITING_POINTS) --rounds 2 --copy-status  # RSS over N waiting sessions (issue 28.2)
	$(PY) -m benchmarks.bench_session_cost --sessions 600 --rounds 5  # memory per session, minimal vs maximal (issue 49.2)
	$(PY) -m benchmarks.bench_fairness --rounds 5 --samples 3 --tenant-a-user  # tenant B's create -> Ready while tenant A churns
	$(PY) -m benchmarks.bench_transport
	$(PY) -m benchmarks.bench_gvisor --rounds 10  # runc vs gVisor: starts the real node (root)
	$(PY) -m benchmarks.bench_wrapper --ref 37dc492 --rounds 20  # the in-pod scripts before issue 29's cuts against now (real node)
	$(PY) -m benchmarks.bench_resume --rounds 10 --periods  # resume after idle suspend, runc and gVisor (real node, root)
	$(PY) -m benchmarks.bench_hibernate --rounds 3  # Hibernate vs Suspend under gVisor: sleep, wake, image size (real node, root)
	$(PY) -m benchmarks.bench_hibernate_fairness --rounds 5  # another namespace's create -> Ready during 16 hibernations (real node, root)
	$(PY) -m benchmarks.bench_scale --points $(SCALE_POINTS) --direct-every 2 --json docs/scale-results.json
	$(PY) -m benchmarks.bench_scale --points 100,1000 --direct-every 2 --operator-cpu 1  # the operator on a CPU of its own
	$(PY) -m benchmarks.plot_scale docs/scale-results.json docs/scale.png
	$(PY) -m benchmarks.bench_shards --waiting --sessions 10000 --rounds 3  # the base vs one replica vs 2 shards (issue 54 item 2)
	$(PY) -m benchmarks.bench_shards --sessions $(SHARD_SESSIONS) --rounds 2  # ... on live sessions (their population: over an hour)
