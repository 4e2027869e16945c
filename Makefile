# slidelimit: make demo, make test, make bench, make lint.
# Every target that needs Redis starts its own throwaway servers through
# scripts/with-redis.sh and stops them afterwards.

GO ?= go
GOLANGCI_LINT_VERSION ?= v2.15.0
# The go-redis matrix of make check: the floor is go.mod's (v9.5.5), the newest is
# whatever `go get github.com/redis/go-redis/v9` gives, and this is the middle.
GOREDIS_MIDDLE ?= v9.14.1
GOREDIS_MIDDLE_RUN ?= ^(TestRedisFaults|TestWrongPasswordConnections|TestExactnessAcrossProcesses|TestSameMillisecondBurst|TestNoScriptRecovery|TestClusterRedirects|TestRetriedCallCountsOnce|TestRedisHung)$$
GOLANGCI_LINT ?= $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

.PHONY: test check check-model check-mutants release-check demo bench bench-pair lint vet fmt tidy test-server

## test: gofmt, go vet, and every module's tests with -race and -short against
## real Redis (one standalone server and a three-primary Cluster, both
## throwaway), integration/sdk's too (the official OpenAI and Anthropic SDKs,
## a module outside go.work), then their allocation tests without -race (whose
## sync.Pool drops items at random), on go-redis v9.5.5, the floor every go.mod pins.
## -short leaves out the long fleet and fault tests that make check runs.
## About 5 minutes warm on 2 cores.
test:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	scripts/each-module.sh $(GO) vet ./...
	cd integration/sdk && GOWORK=off $(GO) vet ./...
	scripts/with-redis.sh sh -c 'scripts/each-module.sh $(GO) test -race -short -count=1 ./... && (cd integration/sdk && GOWORK=off $(GO) test -race -short -count=1 ./...) && scripts/each-module.sh $(GO) test -short -count=1 -run Alloc ./...'

## check: what make test leaves out, run after it by CI. The go-redis matrix:
## core and the integration tests that lean on go-redis's behaviour
## (GOREDIS_MIDDLE_RUN) against a middle release, then core, integration and
## examples whole, long tests included (the LLM proxy's fleet for 60 s), against the
## newest v9 (all with -race);
## every fuzz target for FUZZTIME (100000x: 100,000 inputs) beyond its seeds; and the release check.
check:
	GO=$(GO) scripts/with-redis.sh scripts/test-goredis.sh $(GOREDIS_MIDDLE) core integration='$(GOREDIS_MIDDLE_RUN)'
	SLIDELIMIT_LLMPROXY_RUN=60s GO=$(GO) scripts/with-redis.sh scripts/test-goredis.sh latest
	GO=$(GO) scripts/fuzz.sh
	$(MAKE) --no-print-directory release-check

## check-model: the model checker (integration/model) alone, for DURATION spread over its
## modes, from SEED (0, the default: a random one, printed), with no busy loops beside it and a SLOWLOG bound of
## SLOWLOG (1ms; on a host busy with more than the checker, raise it); RUN narrows it (RUN='TestModel/sequential/standalone'), KEEPGOING=true goes on past
## a failure, IGNORE=kind,... passes over kinds of failure (see integration/README.md).
SEED ?= 0
DURATION ?= 10m
RUN ?= TestModel
KEEPGOING ?= false
SLOWLOG ?= 1ms
IGNORE ?=
check-model:
	@seed=$(SEED); [ "$$seed" != 0 ] || seed=$$(( $$(od -An -N3 -tu4 /dev/urandom) + 2 )); echo "check-model: SEED=$$seed"; \
	scripts/with-redis.sh bash -c 'cd integration && $(GO) test -race -count=1 -timeout 0 -run "$(RUN)" ./model/ \
		-args -model.seed='"$$seed"' -model.duration=$(DURATION) -model.slowlog=$(SLOWLOG) -model.quiet \
		-model.keepgoing=$(KEEPGOING) -model.ignore="$(IGNORE)"'

## check-mutants: the model checker's own regression suite: each patch of
## scripts/mutants/ (MUTANTS, all by default) puts one realistic bug into core/
## in a throwaway copy of the working tree, and the checker must catch it under
## make test's budget or else make check's (BUDGETS, "test check"), each run on
## a throwaway Redis of its own; a table says which budget caught each, in which
## mode, how soon and shrunk to how many steps. MODEL_ARGS go to the checker.
## Fails if a mutant is not caught. About 4 to 10 minutes a mutant on 2 cores.
MUTANTS ?=
check-mutants:
	GO=$(GO) scripts/check-mutants.sh $(MUTANTS)

## test-server: the tests that use a shared server, against one you run (another
## engine, version or managed service) instead of a throwaway one:
##   make test-server REDIS_URL=rediss://user:pass@host:6380/0 [REDIS_CLUSTER_URL=redis://host:port?addr=host2:port2]
## Tests that must stop, restart or misconfigure a server start their own
## local redis-server, or skip without one. The tests write only keys under
## prefixes of their own, and some run SCRIPT FLUSH (the limiter reloads its
## scripts by itself).
test-server:
	@test -n "$(REDIS_URL)" || { echo "usage: make test-server REDIS_URL=redis://host:port [REDIS_CLUSTER_URL=...]"; exit 2; }
	cd core && SLIDELIMIT_REDIS_ADDR='$(REDIS_URL)' SLIDELIMIT_REDIS_CLUSTER_ADDRS='$(REDIS_CLUSTER_URL)' \
		$(GO) test -race -short -count=1 -run '^Test' ./...

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

## bench-pair: the bench of git revision BASE and of the working tree in turns
## (ROUNDS of each, 4 by default) on one Redis: how much faster or slower the
## tree decides, paired against the peers (scripts/bench-pair.sh).
ROUNDS ?= 4
bench-pair:
	@test -n "$(BASE)" || { echo "usage: make bench-pair BASE=<git revision> [ROUNDS=4]"; exit 2; }
	scripts/bench-pair.sh $(BASE) $(ROUNDS)

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
