# egressflow: build, generate, test.
#
# `make test` and `make demo` need root: Open vSwitch, network namespaces and
# veth pairs cannot be created otherwise. Both install what is missing first
# (Debian's openvswitch-switch, and kube-apiserver, etcd, kubectl and helm built from
# the Go module proxy into $(EGRESSFLOW_CACHE)).

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

MODULE   := github.com/egressflow/egressflow
API_PKG  := $(MODULE)/controller/apis
# The API packages, one per group and version (client-gen makes one typed
# client of each, all in one clientset): k8s.ovn.org/v1,
# network.operator.openshift.io/v1 and cloud.network.openshift.io/v1.
API_GROUPS := egressservice/v1 networkoperator/v1 cloudnetwork/v1
API_PKGS   := $(addprefix $(API_PKG)/,$(API_GROUPS))
GEN_DIR  := controller/generated
GEN_PKG  := $(MODULE)/$(GEN_DIR)
HEADER   := test/tools/boilerplate.go.txt
# How client-gen, lister-gen and informer-gen pluralize kinds whose plural
# is not the kind plus "s": the resource egressqoses (as the CRD and the
# reference name it) and the methods EgressQoSes(), not egressqoss.
PLURALS  := EgressQoS:EgressQoSes

# Generator versions: code-generator follows the client-go minor we build
# against; controller-tools v0.21 is the release built on Kubernetes 0.36.
CODEGEN_VERSION          := v0.36.3
CONTROLLER_TOOLS_VERSION := v0.21.0
CODEGEN                  := k8s.io/code-generator/cmd

# Where the Kubernetes binaries are cached, keyed by version (outside the repo).
export EGRESSFLOW_CACHE ?= $(HOME)/.cache/egressflow

# Bounds each go test run of `make test`; the slowest unit package (the
# cluster component's) takes about 12 minutes on 2 cores.
TEST_TIMEOUT ?= 30m
# Bounds the end-to-end suite (make e2e). On 2 cores it takes about 17
# minutes with Go's build cache warm, and about 33 on a machine whose cache
# is cold: the images are cross-built for amd64 and arm64 (TestImage), and
# the upgrade test builds the previous commit. A tighter bound would fail a
# first run on a fresh machine; a looser one only delays the report of a
# hung test.
E2E_TIMEOUT ?= 45m
# How much each fuzz target runs in `make fuzz-smoke` (CI runs it; longer
# fuzzing is `make fuzz`, FUZZTIME_LONG per target). A count, not a duration: with a
# duration, Go 1.26's fuzz coordinator can report a spurious "context
# deadline exceeded" at the deadline on a loaded machine (golang/go#75804,
# fixed in Go 1.27); a count has no deadline to race. 50000 inputs take a
# few seconds per target here.
FUZZTIME ?= 50000x
FUZZTIME_LONG ?= 10m
# How many generated flow texts `make fuzz` checks against ovs-ofctl and a
# real switch (openflow/flowtext's TestTextAgainstOvsOfctl; every `go test` checks a
# few hundred). About a second per 5000 here; it needs root, like make test.
DIFF_FLOWS_LONG ?= 50000

.PHONY: images all build generate manifests lint chart-check test test-deps demo fuzz-smoke fuzz \
	bench-openflow bench-controller bench-egressip-assign bench-cloudip bench-egressrouter bench-agent bench-qos bench-firewall bench-egressip bench-externalroute bench-restart bench-failover bench-scale e2e clean

# DEMO_HOLD=0 makes `make demo` run its scenario and exit instead of keeping
# the cluster up until Ctrl-C; `make test` runs it that way, as a test.
DEMO_HOLD ?=

# The version stamped into the binaries and the images' tag (besides "dev").
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
# The image of both commands; deploy/ names $(IMAGE):dev.
IMAGE ?= egressflow
LDFLAGS := -s -w -X $(MODULE)/cmd/internal/cli.Version=$(VERSION)

all: build

build:
	go build ./...

# IMAGE_ARCHS are the architectures `make images` builds. The build
# machine's own (HOST_ARCH) is tagged $(VERSION) and dev, for the nodes
# here; each is also tagged $(VERSION)-<arch>. The tests ask for the
# machine's own only: each further architecture costs a cross-build of
# both commands and its nft packages' download (cached).
IMAGE_ARCHS ?= amd64 arm64
HOST_ARCH = $(shell go env GOARCH)

## images: the egressflow image for each of IMAGE_ARCHS (both commands, static, and Debian's nft
## for that architecture, FROM scratch; nothing pulled from a registry), tagged $(VERSION)-<arch>,
## and $(VERSION) and dev for the build machine's own; with the OCI labels (version, revision,
## source, created).
images:
	@set -e; work=$$(mktemp -d); trap 'rm -rf "$$work"' EXIT; \
	for arch in $(IMAGE_ARCHS); do \
		ctx="$$work/$$arch"; mkdir -p "$$ctx"; \
		CGO_ENABLED=0 GOARCH=$$arch go build -trimpath -ldflags '$(LDFLAGS)' -o "$$ctx/" ./cmd/egressflow-agent ./cmd/egressflow-controller; \
		bash deploy/image/nft-rootfs.sh "$$ctx/nft" $$arch; \
		cp deploy/image/Dockerfile "$$ctx/"; \
		tags="-t $(IMAGE):$(VERSION)-$$arch"; \
		if [ "$$arch" = "$(HOST_ARCH)" ]; then tags="$$tags -t $(IMAGE):$(VERSION) -t $(IMAGE):dev"; else tags="$$tags -t $(IMAGE):dev-$$arch"; fi; \
		DOCKER_BUILDKIT=0 docker build -q --platform linux/$$arch $$tags \
			--label org.opencontainers.image.title=egressflow \
			--label org.opencontainers.image.description="egressflow's agent and controller: the Kubernetes egress APIs on Open vSwitch" \
			--label org.opencontainers.image.version=$(VERSION) \
			--label org.opencontainers.image.revision=$$(git rev-parse HEAD 2>/dev/null || echo unknown) \
			--label org.opencontainers.image.source=https://$(MODULE) \
			--label org.opencontainers.image.created=$$(date -u +%Y-%m-%dT%H:%M:%SZ) \
			"$$ctx" >/dev/null; \
		echo "built $(IMAGE):$(VERSION)-$$arch"; \
	done

## generate: deepcopy, clientset, informers, listers and apply configurations from controller/apis.
generate:
	find controller/apis -name zz_generated.deepcopy.go -delete
	rm -rf $(GEN_DIR)
	go run $(CODEGEN)/deepcopy-gen@$(CODEGEN_VERSION) --go-header-file $(HEADER) \
		--output-file zz_generated.deepcopy.go $(API_PKGS)
	go run $(CODEGEN)/applyconfiguration-gen@$(CODEGEN_VERSION) --go-header-file $(HEADER) \
		--output-dir $(GEN_DIR)/applyconfiguration --output-pkg $(GEN_PKG)/applyconfiguration \
		$(API_PKGS)
	go run $(CODEGEN)/client-gen@$(CODEGEN_VERSION) --go-header-file $(HEADER) \
		--output-dir $(GEN_DIR)/clientset --output-pkg $(GEN_PKG)/clientset \
		--clientset-name versioned --plural-exceptions $(PLURALS) --apply-configuration-package $(GEN_PKG)/applyconfiguration \
		--input-base $(API_PKG) $(addprefix --input ,$(API_GROUPS))
	go run $(CODEGEN)/lister-gen@$(CODEGEN_VERSION) --go-header-file $(HEADER) \
		--output-dir $(GEN_DIR)/listers --output-pkg $(GEN_PKG)/listers --plural-exceptions $(PLURALS) \
		$(API_PKGS)
	go run $(CODEGEN)/informer-gen@$(CODEGEN_VERSION) --go-header-file $(HEADER) \
		--output-dir $(GEN_DIR)/informers --output-pkg $(GEN_PKG)/informers --plural-exceptions $(PLURALS) \
		--versioned-clientset-package $(GEN_PKG)/clientset/versioned \
		--listers-package $(GEN_PKG)/listers \
		$(API_PKGS)

## manifests: the CRDs in deploy/crds/ from the kubebuilder markers on the types,
## and their copies in the Helm chart (deploy/charts/egressflow/crds, checked by test/chart).
manifests:
	go run sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION) \
		crd paths=./controller/apis/... output:crd:artifacts:config=deploy/crds
	rm -f deploy/charts/egressflow/crds/*.yaml
	cp deploy/crds/*_*.yaml deploy/charts/egressflow/crds/

## lint: go vet and a gofmt check.
lint:
	go vet ./...
	go vet -tags demo ./test/dockercluster
	go vet -tags e2e ./test/dockercluster
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi

## chart-check: the Helm chart (deploy/charts/egressflow): helm lint and helm template with
## the default values and with another namespace's and image's, the rendered objects equal
## to deploy/'s, its copies of the CRDs, policies and monitoring files equal to deploy/'s
## (test/chart; `make test` runs it within go test ./...).
chart-check: test-deps
	go test -count=1 -v ./test/chart

## test-deps: install Open vSwitch (Debian) and build the Kubernetes binaries if missing.
test-deps:
	bash test/tools/install-deps.sh

## test: everything (needs root): lint, unit and integration tests against real
## OVS and a real kube-apiserver, the generated-code check, a short fuzz run.
test: test-deps lint
	bash test/tools/gotest.sh -count=1 -timeout $(TEST_TIMEOUT) ./...
	$(MAKE) e2e
	DEMO_HOLD=0 bash test/tools/gotest.sh -tags demo -count=1 -timeout $(TEST_TIMEOUT) -run TestDemo ./test/dockercluster
	$(MAKE) fuzz-smoke

## e2e: egressflow installed with kubectl apply -k on a real Kubernetes cluster in
## Docker (test/dockercluster: kubelet, containerd and OVS per node container),
## tested with real pods and packets. Builds and caches the node image and the
## Kubernetes binaries the first time (make test-deps).
e2e: test-deps
	bash test/tools/gotest.sh -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -v ./test/dockercluster

## demo: the main job: a real Kubernetes cluster in Docker on this machine (three node
## containers with kubelet, containerd and OVS), egressflow installed with
## kubectl apply -k deploy/, and an EgressService whose packets leave with the LB IP,
## through a host's power loss (docker kill). Stays up until Ctrl-C (DEMO_HOLD=0: exits).
demo: test-deps
	DEMO_HOLD=$(DEMO_HOLD) go test -tags demo -count=1 -timeout 0 -v -run TestDemo ./test/dockercluster

## fuzz-smoke: every fuzz target, briefly, on top of its committed seed corpus.
fuzz-smoke:
	bash test/tools/fuzz.sh $(FUZZTIME)

## fuzz: every fuzz target for FUZZTIME_LONG, then DIFF_FLOWS_LONG generated flow
## texts checked against ovs-ofctl and a real switch (needs root).
fuzz:
	bash test/tools/fuzz.sh $(FUZZTIME_LONG)
	OPENFLOW_DIFF_FLOWS=$(DIFF_FLOWS_LONG) go test -count=1 -v -run '^TestTextAgainstOvsOfctl$$' ./openflow/flowtext/

## bench-openflow: our OpenFlow client against ovs-ofctl on the same switch.
bench-openflow: test-deps
	bash test/bench/openflow.sh

## bench-controller: host assignment at 1,000 nodes x 5,000 services against a real API server.
bench-controller: test-deps
	bash test/bench/controller.sh

## bench-cloudip: the cloud controller at 1,000 CloudPrivateIPConfigs over 100 nodes against a real API server
## and the local EC2 endpoint (test/fakeec2) answering after 200 ms: time to all Assigned, EC2 calls per
## assignment, a node's death.
bench-cloudip: test-deps
	bash test/bench/cloudip.sh

## bench-egressrouter: EgressRouter: the controller at 10 nodes x 1,000 routers of 10 rules against a real
## API server (time to all Available, writes, a holder lost), then a holder's agent at 100 routers x 10 rules
## against a real API server and OVS (full sync against ovs-ofctl bundle, restart, a router moved here),
## then on the cluster in Docker its failover against the reference's pod rescheduling (node killed).
bench-egressrouter: test-deps
	bash test/bench/egressrouter.sh

## bench-egressip-assign: EgressIP assignment at 100 egress nodes x 1,000 EgressIPs against a real API server.
bench-egressip-assign: test-deps
	bash test/bench/egressip-assign.sh

## bench-agent: the node agent at 10,000 services x 10 endpoints against a real API server and OVS.
bench-agent: test-deps
	bash test/bench/agent.sh

## bench-qos: the agent's EgressQoS at 1,000 namespaces x 10 rules x 10 pods, all on one node (a bound on any real node), inside the agent's memory limit.
bench-qos: test-deps
	bash test/bench/qos.sh

## bench-firewall: the agent's EgressFirewall at 100 namespaces x 1,000 rules x 50 pods, all on one node (worst case).
bench-firewall: test-deps
	bash test/bench/firewall.sh

## bench-externalroute: the agent's AdminPolicyBasedExternalRoute at 1,000 namespaces x 2 policies x 4 hops
## x 10 pods, all on one node: flows and groups, full sync against ovs-ofctl bundle, a hop's BFD down to
## the groups changed (p50/p99); then BFD's detection time against our engine and FRR's bfdd.
bench-externalroute: test-deps
	bash test/bench/externalroute.sh

## bench-scale: 5,000 nodes (kwok), 150,000 pods, 10,000 EgressServices and 1,000 EgressIPs against a
## real API server, the real controller, each liveness protocol on its own control plane: API and etcd
## write rates, the events of each stream one agent watches, assignment time and writes, controller CPU and
## memory, failover.
bench-scale: test-deps
	bash test/bench/scale.sh

## bench-egressip: EgressIP, as three tables: the assignment (bench-egressip-assign); the agent
## with 10,000 selected pods on one holder (full sync against ovs-ofctl --bundle, restart,
## takeover and relabel latency, memory); on the cluster in Docker, 10 rounds of docker kill of
## an address's holder: fault -> status, first packet and the external host's neighbour entry.
bench-egressip: bench-egressip-assign
	bash test/bench/egressip.sh
	go test -tags e2e -run '^$$' -bench BenchmarkEgressIPFailover -benchtime 10x -timeout 60m ./test/dockercluster

## bench-restart: ovs-vswitchd killed and restarted under traffic (at once and after 3 s,
## 10 rounds each): time from vswitchd answering to the first LB-IP packet, pod-IP packets seen.
bench-restart: test-deps
	go test -run '^$$' -bench BenchmarkVswitchdRestart -benchtime 10x -timeout 20m ./controller/agent/

## bench-failover: on the cluster in Docker, its bring-up fresh (every image and Kubernetes
## binary built again) and cached, then 10 rounds each of docker kill and docker pause
## of the host under traffic, with the Lease-only liveness (1 s renewals, 3 s Leases, no
## probes) and then the default (probes) side by side: fault -> first LB-IP packet through
## the new host, pod-IP frames flooded; then 10 rounds of docker kill of the node that runs
## both the leader and the host.
bench-failover: test-deps
	BRINGUP_FRESH=1 go test -tags e2e -run '^$$' -bench BenchmarkBringUp -benchtime 1x -timeout 60m ./test/dockercluster
	go test -tags e2e -run '^$$' -bench BenchmarkBringUp -benchtime 1x -timeout 60m ./test/dockercluster
	go test -tags e2e -run '^$$' -bench BenchmarkFailover -benchtime 10x -timeout 60m ./test/dockercluster
	go test -tags e2e -run '^$$' -bench BenchmarkLeaderHostFailover -benchtime 10x -timeout 60m ./test/dockercluster

clean:
	go clean -testcache
