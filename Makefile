# Everyone (and CI) runs these targets. `make help` lists them.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
export GOFLAGS ?= -mod=mod
export CGO_ENABLED ?= 0

BIN := $(CURDIR)/bin
comma := ,
CONTROLPLANE_BINS := kube-apiserver kube-controller-manager etcd
# What make test builds from hack/tools: the envtest suites' control plane,
# kubectl (a suite checks `kubectl get` columns) and helm3 (render parity).
TEST_TOOLS := $(CONTROLPLANE_BINS) kubectl helm3
NODE_BINS := kube-scheduler kubelet
DEV_PACKAGES := containerd runc containernetworking-plugins iptables iproute2
GO_TEST_FLAGS ?= -count=1 -timeout 25m
DEMO_ARGS ?=

# Every binary says what it is (`fleet version`): the release, charts/fleet's
# appVersion unless VERSION=... is given, and the commit, "-dirty" when the
# work tree has changes. Images are tagged IMAGE_REPO:VERSION, the charts'
# default image.
ifndef VERSION
VERSION := $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' charts/fleet/Chart.yaml)
endif
ifndef COMMIT
COMMIT := $(shell c=$$(git rev-parse HEAD 2>/dev/null) && { [ -z "$$(git status --porcelain 2>/dev/null)" ] || c=$$c-dirty; echo $$c; })
endif
IMAGE_REPO ?= docker.io/gitops-fleet/fleet
LDFLAGS := -X github.com/gitops-fleet/fleet/internal/version.Version=$(VERSION) -X github.com/gitops-fleet/fleet/internal/version.Commit=$(COMMIT)
# push-images: where (REGISTRY=host[:port]/path; the image is REGISTRY/fleet:VERSION),
# for which platforms, and INSECURE=1 for a registry served over plain http.
PLATFORMS ?= linux/amd64,linux/arm64
REGISTRY ?=
INSECURE ?=
ARCHIVE ?=

.PHONY: all
all: build controlplane-bins ## Build the fleet binary and the local control planes.

.PHONY: help
help: ## List the targets.
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "%-20s %s\n", $$1, $$2}'

.PHONY: build
# No -trimpath: the build then shares its compiled packages with go vet and
# go test, which saves minutes on a cold cache.
build: ## Build bin/fleet, the product (VERSION and COMMIT stamped; `bin/fleet version`), and bin/fleet-dev, the dev harness (dev clusters, images, benchmarks).
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/fleet ./cmd/fleet
	go build -ldflags '$(LDFLAGS)' -o $(BIN)/fleet-dev ./dev/cmd/fleet-dev

.PHONY: controlplane-bins
controlplane-bins: ## Build kube-apiserver, kube-controller-manager and etcd into bin/ (skipped when current).
	hack/build-tools.sh $(CONTROLPLANE_BINS)

.PHONY: node-bins
node-bins: ## Build what a real dev cluster runs (control plane, kube-scheduler, kubelet) into bin/.
	hack/build-tools.sh $(CONTROLPLANE_BINS) $(NODE_BINS)

.PHONY: dev-bins
# One go build for all of them: the binaries share most of their packages,
# and one invocation compiles and links them in parallel.
dev-bins: ## node-bins plus kubectl, for working with the demo's clusters.
	hack/build-tools.sh $(CONTROLPLANE_BINS) $(NODE_BINS) kubectl

.PHONY: dev-deps
dev-deps: ## Install containerd, runc, CNI plugins and iptables from Debian when missing (root).
	@missing=""; for p in $(DEV_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "installing$$missing"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null || \
		{ apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q $$missing >/dev/null; }; fi

.PHONY: images
images: build ## Build IMAGE_REPO:VERSION and the dev clusters' pause image (static binaries, no registry) into bin/images/images.tar, and the fleet image alone into bin/images/fleet.tar.
	mkdir -p $(BIN)/images
	# -buildvcs=false: LDFLAGS stamp the commit; Go's own stamp would also
	# record whether the work tree has untracked files, and the same source
	# would make two images.
	CGO_ENABLED=0 go build -buildvcs=false -ldflags '-s -w $(LDFLAGS)' -o $(BIN)/images/fleet ./cmd/fleet
	CGO_ENABLED=0 go build -buildvcs=false -ldflags '-s -w' -o $(BIN)/images/pause ./dev/cmd/pause
	$(BIN)/fleet-dev images --fleet-binary $(BIN)/images/fleet --pause-binary $(BIN)/images/pause \
		--repo $(IMAGE_REPO) --tag $(VERSION) --out $(BIN)/images/images.tar --fleet-out $(BIN)/images/fleet.tar

.PHONY: push-images
push-images: ## Push the multi-arch image REGISTRY/fleet:VERSION for PLATFORMS (INSECURE=1: plain http); ARCHIVE=bin/images/fleet.tar pushes that archive's image instead.
	@if [ -z "$(REGISTRY)" ]; then echo "REGISTRY is required: make push-images REGISTRY=host[:port]/path (the image is REGISTRY/fleet:$(VERSION))" >&2; exit 2; fi
	@if [ -n "$(ARCHIVE)" ]; then \
		set -x; go run ./hack/push-images --image $(REGISTRY)/fleet:$(VERSION) --archive $(ARCHIVE) $(if $(INSECURE),--insecure); \
	else \
		args=(); for p in $(subst $(comma), ,$(PLATFORMS)); do \
			IFS=/ read -r os arch variant <<<"$$p"; \
			if [ -z "$$arch" ] || [ -n "$$variant" ]; then echo "PLATFORMS: $$p must be os/arch (linux/amd64,linux/arm64)" >&2; exit 2; fi; \
			out=$(BIN)/release/$$os-$$arch/fleet; \
			echo "building $$out"; \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch go build -buildvcs=false -ldflags '-s -w $(LDFLAGS)' -o $$out ./cmd/fleet; \
			args+=(--binary "$$p=$$out"); \
		done; \
		set -x; go run ./hack/push-images --image $(REGISTRY)/fleet:$(VERSION) "$${args[@]}" $(if $(INSECURE),--insecure); \
	fi

$(BIN)/controller-gen: hack/tools/go.mod hack/tools/go.sum
	hack/build-tools.sh controller-gen

# bin/helm, the Helm 4 CLI, is a tool of the main module (go.mod `tool` line,
# the version the renderer's Helm SDK uses), so the CLI and the SDK never
# drift apart. bin/helm3, a Helm 3 CLI at an approved version, comes from
# hack/tools: the render parity tests check both (users review with either).
$(BIN)/helm: go.mod
	go build -ldflags "-X helm.sh/helm/v4/internal/version.version=$$(go list -m -f '{{.Version}}' helm.sh/helm/v4)" \
		-o $(BIN)/helm helm.sh/helm/v4/cmd/helm

$(BIN)/helm3: hack/tools/go.mod hack/tools/go.sum
	hack/build-tools.sh helm3

.PHONY: helm
helm: $(BIN)/helm $(BIN)/helm3 ## Install the helm CLIs into bin/: helm (Helm 4, the SDK's version) and helm3 (Helm 3, for the parity tests).

.PHONY: generate
generate: $(BIN)/controller-gen ## Generate deepcopy code and CRDs; copy CRDs, policies and shared ClusterRoles into charts/fleet; write charts/fleet/values.schema.json from internal/config's rules.
	$(BIN)/controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(BIN)/controller-gen crd paths=./api/... output:crd:dir=kustomize/base/crds
	rm -f charts/fleet/crds/*.yaml && mkdir -p charts/fleet/crds
	cp kustomize/base/crds/*.yaml charts/fleet/crds/
	rm -f charts/fleet/templates/policies/*.yaml && mkdir -p charts/fleet/templates/policies
	cp kustomize/base/policies/*.yaml charts/fleet/templates/policies/
	rm -f charts/fleet/templates/rbac-shared/*.yaml && mkdir -p charts/fleet/templates/rbac-shared
	cp kustomize/base/rbac/*.yaml charts/fleet/templates/rbac-shared/
	go run ./hack/valuesschema

.PHONY: fmt
fmt: ## Format Go code.
	gofmt -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet.
	go vet ./...

.PHONY: lint
lint: vet helm ## Run go vet, check gofmt, helm lint the charts (Helm 4 and Helm 3).
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(BIN)/helm lint --strict charts/fleet-agent -n cattle-fleet-system -f hack/lint/fleet-agent-values.yaml
	$(BIN)/helm lint --strict charts/fleet -n cattle-fleet-system
	$(BIN)/helm3 lint --strict charts/fleet-agent -n cattle-fleet-system -f hack/lint/fleet-agent-values.yaml
	$(BIN)/helm3 lint --strict charts/fleet -n cattle-fleet-system

.PHONY: golden
golden: ## Rewrite the renderer's golden files after an intended change to the agent chart.
	go test ./renderer -run TestAgentRender_Golden -update

.PHONY: layering
layering: ## Check the import rules: the agent links no Helm or kustomize, no test code in production packages, controller/agent/renderer import no test or dev-environment package.
	hack/check-layering.sh

.PHONY: check-monitoring
check-monitoring: ## Parse the example PrometheusRule's PromQL with Prometheus's parser (a module of its own: examples/monitoring/check).
	cd examples/monitoring/check && GOWORK=off go test -count=1 ./...

.PHONY: sops-compat
sops-compat: ## Check that gitops/sops and sops' own library read each other's files alike (a module of its own: dev/sopscompat, so the fleet module does not depend on sops' cloud KMS SDKs).
	cd dev/sopscompat && GOWORK=off go test -count=1 ./...

.PHONY: test-remotedialer
test-remotedialer: ## Run upstream's tests of the remotedialer fork (a module of its own: third_party/remotedialer, see its FORK.md).
	cd third_party/remotedialer && CGO_ENABLED=1 go test -race -count=1 ./...

.PHONY: shared-modules
# hack/tools and the main module compile many packages alike (k8s.io/api,
# client-go, apiserver, golang.org/x/..., grpc, otel, ...): once for both on
# a fresh machine only when each module is at one version in both (and the
# flags match: CGO_ENABLED=0, no -trimpath). That halves make test's first
# phase; hack/sharedmods says which module to raise, and where, when not.
shared-modules: ## Fail when a module whose packages both the main module and hack/tools compile is at two versions (go run ./hack/sharedmods).
	go run ./hack/sharedmods

.PHONY: verify
verify: generate lint layering shared-modules ## Fail when generated files are stale, code is not formatted, an import rule is broken or hack/tools and the main module compile a module at two versions.
	go mod tidy
	cd hack/tools && go mod tidy
	@if [ -n "$$(git status --porcelain -- api kustomize charts go.mod go.sum hack/tools/go.mod hack/tools/go.sum)" ]; then \
		echo "generated files or go.mod are stale: run 'make generate' and 'go mod tidy' (in hack/tools too), then commit"; \
		git status --porcelain -- api kustomize charts go.mod go.sum hack/tools/go.mod hack/tools/go.sum; git diff --stat; exit 1; fi

# $(call timed,NAME,COMMAND) runs COMMAND and prints how long it took, so
# make test shows where its time goes.
timed = echo "=== make $@: $(1)"; t=$$(date +%s); \
	$(2) || { echo "=== make $@: $(1) failed after $$(( $$(date +%s) - t ))s"; exit 1; }; \
	echo "=== make $@: $(1) took $$(( $$(date +%s) - t ))s"

.PHONY: test
# RACE=1 (CI): every test once, with the race detector where hack/race.sh
# says and without it elsewhere, side by side, then the remotedialer fork's
# own race tests; needs cgo and gcc.
RACE ?=
test: ## Run the unit and envtest suites (hack/unit.sh: real kube-apiserver, etcd and kube-controller-manager; real clusters: make e2e); builds what they need (the control plane, kubectl, both helm CLIs). Prints each phase's time. RACE=1 (CI): each test once, with the race detector where hack/race.sh says.
	@$(call timed,binaries (hack/test-prepare.sh: the suites' compile, then the control plane and kubectl and helm3 beside helm),TEST_RACE="$(RACE)" TEST_TOOLS="$(TEST_TOOLS)" hack/test-prepare.sh)
ifeq ($(RACE),1)
	@$(call timed,suites (hack/race.sh: the race-tested suites with the race detector$(comma) the others beside them without it),RACE_PLAIN=1 FLEET_BIN_DIR=$(BIN) PATH=$(BIN):$$PATH hack/race.sh $(GO_TEST_FLAGS))
	@$(call timed,the remotedialer fork's own race tests,$(MAKE) --no-print-directory test-remotedialer)
else
	@$(call timed,suites (hack/unit.sh: the unit and envtest suites),FLEET_BIN_DIR=$(BIN) PATH=$(BIN):$$PATH hack/unit.sh $(GO_TEST_FLAGS))
endif

.PHONY: e2e
e2e: ## Run the e2e suite on real local clusters (kubelet, containerd and the product's image; root); builds and installs what it needs. CI runs it beside make race.
	@$(call timed,dev-deps,$(MAKE) --no-print-directory dev-deps)
	@$(call timed,binaries (node binaries, kubectl, helm and the images),$(MAKE) --no-print-directory dev-bins $(BIN)/helm images)
	@$(call timed,e2e suite,source hack/testflags.sh && FLEET_E2E=1 FLEET_BIN_DIR=$(BIN) PATH=$(BIN):$$PATH go test $(GO_TEST_FLAGS) -v ./test/e2e/)

.PHONY: ci-bins
# One go build of hack/tools for all of them (they share most packages).
ci-bins: dev-deps ## What make e2e and make test build, built first (CI does, before running both side by side): the control plane, the nodes' binaries, kubectl, both helm CLIs, the product and its images.
	hack/build-tools.sh $(CONTROLPLANE_BINS) $(NODE_BINS) kubectl helm3
	$(MAKE) --no-print-directory $(BIN)/helm images

.PHONY: race
race: controlplane-bins helm ## Run the unit and envtest suites with the race detector (hack/race.sh: where fleet's code has concurrency; not e2e), then the remotedialer fork's own tests (make test-remotedialer; they are race tests, and a cold make test would compile the race runtime for them alone); needs cgo and gcc. CI runs make test RACE=1, which also runs the rest without it.
	CGO_ENABLED=1 FLEET_BIN_DIR=$(BIN) PATH=$(BIN):$$PATH hack/race.sh $(GO_TEST_FLAGS)
	$(MAKE) --no-print-directory test-remotedialer

.PHONY: fuzz
FUZZTIME ?= 10s
FUZZ_PKGS ?= ./...
fuzz: ## Run every fuzz target (FUZZ_PKGS, default all) for FUZZTIME (default 10s) each.
	FUZZTIME=$(FUZZTIME) FLEET_BIN_DIR=$(BIN) hack/fuzz.sh $(FUZZ_PKGS)

BENCH_ARGS ?=
.PHONY: bench
bench: controlplane-bins build ## Run the Go benchmarks and `fleet-dev bench` (BENCH_ARGS=--quick for a smoke run); writes bench.json.
	go test -run '^$$' -bench . -benchmem ./renderer/
	FLEET_BIN_DIR=$(BIN) $(BIN)/fleet-dev bench --json bench.json $(BENCH_ARGS)

.PHONY: demo
demo: dev-deps dev-bins helm images ## Real upstream + two downstream clusters, both registration flows, a Bundle (DEMO_ARGS=--exit: stop once Ready).
	FLEET_BIN_DIR=$(BIN) $(BIN)/fleet-dev demo $(DEMO_ARGS)

.PHONY: dev-down
dev-down: build ## Stop the demo's clusters and remove everything they left on the machine.
	$(BIN)/fleet-dev down

.PHONY: clean
clean: ## Remove built binaries (keeps the slow control-plane builds unless CLEAN_ALL=1).
	rm -f $(BIN)/fleet $(BIN)/fleet-dev
	if [ "$${CLEAN_ALL:-}" = 1 ]; then rm -rf $(BIN); fi
