# slidelimit: make demo, make test, make bench, make lint.
# Every target that needs Redis starts its own throwaway servers through
# scripts/with-redis.sh and stops them afterwards.

GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
# The go-redis matrix of make test: the floor is go.mod's (v9.5.5), the newest is
# whatever `go get github.com/redis/go-redis/v9` gives, and this is the middle.
GOREDIS_MIDDLE ?= v9.14.1
GOREDIS_MIDDLE_RUN ?= ^(TestRedisFaults|TestWrongPasswordConnections|TestExactnessAcrossProcesses|TestSameMillisecondBurst|TestNoScriptRecovery|TestClusterRedirects|TestRetriedCallCountsOnce|TestRedisHung)$$
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: test release-check demo bench lint vet fmt tidy

## test: vet and test every module with -race against real Redis (standalone and Cluster),
## and their allocation tests without -race (whose sync.Pool drops items at random),
## against go-redis v9.5.5, the floor every go.mod pins; then a go-redis matrix: core and
## the integration tests that lean on go-redis's behaviour (retries, pipelines, redirects,
## NOSCRIPT, timeouts, Redis's fault replies; GOREDIS_MIDDLE_RUN) against a middle release,
## GOREDIS_MIDDLE (the whole of integration would add minutes), and core, integration and
## examples whole against the newest v9; then every fuzz target for FUZZTIME (10s) beyond
## its seeds, then the release check.
test:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	scripts/each-module.sh $(GO) vet ./...
	scripts/with-redis.sh scripts/each-module.sh $(GO) test -race -count=1 ./...
	scripts/with-redis.sh scripts/each-module.sh $(GO) test -count=1 -run 'Alloc' ./...
	GO=$(GO) scripts/with-redis.sh scripts/test-goredis.sh $(GOREDIS_MIDDLE) core integration='$(GOREDIS_MIDDLE_RUN)'
	GO=$(GO) scripts/with-redis.sh scripts/test-goredis.sh latest
	GO=$(GO) scripts/with-redis.sh scripts/fuzz.sh
	$(MAKE) --no-print-directory release-check

## release-check: publish every library module of the working tree at the CHANGELOG's
## version into a file-based module proxy, go get each alone in a fresh module outside
## the workspace, and build and test every example folder copied alone (see RELEASING.md).
release-check:
	WITH_REDIS_CLUSTER=0 scripts/with-redis.sh scripts/release-check.sh

## demo: one limit shared by two server processes, against a throwaway Redis.
demo:
	WITH_REDIS_CLUSTER=0 scripts/with-redis.sh scripts/demo.sh

## bench: slidelimit beside redis_rate, ulule/limiter, the classic script and the
## redis-benchmark ceiling (see bench/ and BENCHMARKS.md); about ten minutes.
bench:
	WITH_REDIS_CLUSTER=0 scripts/with-redis.sh scripts/bench.sh

## lint: golangci-lint in every module, with the configuration at the root,
## and a check that every go.mod and go.sum is tidy.
lint:
	scripts/each-module.sh $(GOLANGCI_LINT) run --config $(CURDIR)/.golangci.yml ./...
	scripts/each-module.sh env GOWORK=off $(GO) mod tidy -diff

vet:
	scripts/each-module.sh $(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

tidy:
	scripts/each-module.sh $(GO) mod tidy
