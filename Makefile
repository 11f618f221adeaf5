# eventgate — one entry point for building, generating, testing and running.
SHELL := /bin/bash
GO    ?= go
BIN   := $(CURDIR)/bin
TOOLS := $(BIN)/buf $(BIN)/protoc-gen-go $(BIN)/protoc-gen-go-grpc $(BIN)/protoc-gen-go-vtproto $(BIN)/protoc-gen-grpc-gateway $(BIN)/protoc-gen-openapiv2
BENCH_SCALE ?= full
# Pinned in deploy/tools/go.mod: render and validate the Kubernetes chart.
DEPLOY_TOOLS := $(BIN)/helm $(BIN)/kubeconform $(BIN)/k8sschema

.PHONY: all build run test test-go lint generate generate-k8s-openapi check-generated tools chdb bench bench-go pgo clean deploy-tools deploy-check

all: build

## build: compile the gateway into bin/gateway and the CLI into bin/eventgate
build:
	$(GO) build -o $(BIN)/gateway ./cmd/gateway
	$(GO) build -o $(BIN)/eventgate ./cmd/eventgate

## run: set up and run the gateway on its embedded defaults (gRPC :9090, HTTP :8080, data in ./data)
run: chdb build
	$(BIN)/gateway $(ARGS)

## chdb: fetch the embedded ClickHouse engine (libchdb.so) if it is missing
chdb:
	@bash scripts/fetch-chdb.sh >/dev/null

## tools: build the pinned code generators and buf from tools/go.mod (offline-capable)
tools: $(TOOLS)
$(TOOLS): tools/go.mod tools/go.sum
	cd tools && GOBIN=$(BIN) $(GO) install tool
	@touch $(TOOLS)

## generate: regenerate gen/ from proto/
generate: tools
	$(BIN)/buf format -w
	$(BIN)/buf generate
	$(BIN)/buf generate --template buf.gen.vtproto.yaml --path proto/eventgate/v1/event.proto --path proto/eventgate/v1/event_service.proto

## generate-k8s-openapi: regenerate the Kubernetes types' OpenAPI definitions (internal/openapi) with kube-openapi
generate-k8s-openapi:
	cd tools && GOBIN=$(BIN) $(GO) install k8s.io/kube-openapi/cmd/openapi-gen
	$(BIN)/openapi-gen --output-dir internal/openapi --output-pkg github.com/eventgate/eventgate/internal/openapi \
		--output-file zz_generated.openapi.go --go-header-file /dev/null --report-filename /dev/null \
		k8s.io/api/events/v1 k8s.io/api/core/v1 k8s.io/apimachinery/pkg/apis/meta/v1 k8s.io/apimachinery/pkg/runtime \
		k8s.io/apimachinery/pkg/version k8s.io/apimachinery/pkg/api/resource k8s.io/apimachinery/pkg/util/intstr

## check-generated: fail when gen/ (or proto formatting) drifts from proto/
check-generated: generate
	@git diff --exit-code -- gen proto || (echo "gen/ or proto/ drifted: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git status --porcelain -- gen proto)" || (git status --porcelain -- gen proto; echo "untracked generated files: run 'make generate' and commit" >&2; exit 1)

## lint: buf lint, buf breaking against main (when it exists), gofmt and go vet
lint: tools
	$(BIN)/buf lint
	@# The API must not break against the previous commit (FILE rules).
	@if git cat-file -e HEAD~1:buf.yaml 2>/dev/null; then $(BIN)/buf breaking --against '.git#ref=HEAD~1'; fi
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || (echo "not gofmt-formatted: $$out" >&2; exit 1)
	$(GO) vet ./...

## test: set up everything and pass the whole suite (what CI runs)
test: chdb check-generated lint deploy-check test-go

test-go:
	$(GO) test -race -count=1 -timeout 30m ./...

## deploy-tools: build the pinned helm, kubeconform and k8sschema from deploy/tools/go.mod (offline-capable)
deploy-tools: $(DEPLOY_TOOLS)
$(DEPLOY_TOOLS): deploy/tools/go.mod deploy/tools/go.sum deploy/tools/k8sschema/main.go
	cd deploy/tools && GOBIN=$(BIN) $(GO) install tool ./k8sschema
	@touch $(DEPLOY_TOOLS)

## deploy-check: helm lint and helm template the chart (deploy/eventgate) for each topology in its ci/,
## and validate the manifests with kubeconform against schemas of the Kubernetes API types, offline
deploy-check: deploy-tools
	BIN=$(BIN) bash deploy/check.sh

## bench: measure the gateway (bin/gateway, a fresh data dir) against its raw parts in one run and print
## one table (also bench-results.json); BENCH_SCALE=small takes under 5 minutes, full under 30.
## BENCH_ARGS passes more flags to cmd/bench (e.g. -profile, -only emit,latency).
bench: chdb build
	$(GO) build -o $(BIN)/bench ./cmd/bench
	$(BIN)/bench -scale $(BENCH_SCALE) -gateway $(BIN)/gateway -work-dir $(CURDIR)/bench-data -json $(CURDIR)/bench-results.json $(BENCH_ARGS)

## pgo: profile bin/gateway through the bench's write and latency phases into cmd/gateway/default.pgo,
## which every `go build` of the gateway reads (profile-guided optimization); commit it. ~12 minutes.
pgo: chdb build
	$(GO) build -o $(BIN)/bench ./cmd/bench
	$(BIN)/bench -scale full -only emit,latency -gateway $(BIN)/gateway -work-dir $(CURDIR)/bench-data -json $(CURDIR)/bench-data/pgo-results.json -pgo $(CURDIR)/cmd/gateway/default.pgo

## bench-go: the go test benchmarks of the gateway package (watch fan-out, emit→queryable)
bench-go: chdb
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 60m ./internal/gateway/

clean:
	rm -rf $(BIN) data bench-data
