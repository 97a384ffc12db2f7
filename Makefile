# logagent: `make dev` runs a local cluster, `make test` runs every test.
# Needs only Go 1.26, make and git: everything else is built from pinned modules.

SHELL         := /bin/bash
.SHELLFLAGS   := -o pipefail -c
GO        ?= go
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo 0.1.0-dev)
LDFLAGS   := -X main.version=$(VERSION)
# What bin/logagent is built from; ui/static holds the status page's files,
# embedded in the binary.
GO_FILES  := $(shell find . -name '*.go' -not -path './tools/*' -not -path './.logagent-dev/*') go.mod go.sum $(wildcard config/*.hcl config/dev/*.hcl) $(wildcard ui/static/*)
TEST_TIMEOUT ?= 20m
TORTURE_CRASH_ITERS     ?= 20000
TORTURE_SIM_ITERS       ?= 20000
TORTURE_FAILOVER_CYCLES ?= 100
# Wall time of the fault-injection scenarios in `make torture`, shared
# between them (internal/jepsen): make torture DURATION=30m.
DURATION                ?= 10m
# The failure-detection timings the fault-injection scenarios run with:
# shipped (the agents' built-in defaults, what users get) or fast
# (internal/testcluster's shortened ones). Every figure they print says which.
JEPSEN_TIMING           ?= shipped
# Cycles of `make dead-agent` (about 20 s each with the shipped timings).
DEAD_CYCLES             ?= 20
# Cycles of `make duplicates`, per variant, and which variants it runs
# (plain, idempotent or both, as a regexp alternation).
DUP_CYCLES              ?= 30
DUP_VARIANTS            ?= plain|idempotent
# The lines of a verbose jepsen run worth seeing: verdicts, figures, where a
# failing run's files are.
JEPSEN_LINES := ^ *(=== RUN|--- |ok|FAIL|PASS)|VALID|INVALID|agents run with|failover in|first ack|longest time|run kept in|^ +\|

# Tests find the programs they run here, so they test what `make build` built.
export LOGAGENT_BIN        := $(CURDIR)/bin/logagent
export LOGAGENT_CONSUL_BIN := $(CURDIR)/bin/consul
export LOGAGENT_JEPSEN_TIMING := $(JEPSEN_TIMING)

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[1m%-8s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: bin/logagent ## Build bin/logagent

bin/logagent: $(GO_FILES)
	$(GO) build -ldflags '$(LDFLAGS)' -o $@ ./cmd/logagent

.PHONY: consul
consul: bin/consul ## Build bin/consul (v1.14.11, pinned in tools/go.mod; ~3 min the first time)

bin/consul: tools/go.mod tools/go.sum
	cd tools && $(GO) build -o ../bin/consul github.com/hashicorp/consul

.PHONY: nats
nats: bin/nats-server ## Build bin/nats-server (v2.15.2, pinned in tools/nats/go.mod) for side-by-side benchmarks

bin/nats-server: tools/nats/go.mod tools/nats/go.sum
	cd tools/nats && $(GO) build -o ../../bin/nats-server github.com/nats-io/nats-server/v2

BENCH_FLAGS ?=

bin/benchrun: $(wildcard tools/bench/*.go) tools/bench/go.mod tools/bench/go.sum $(GO_FILES)
	cd tools/bench && $(GO) build -o ../../bin/benchrun .

.PHONY: bench
bench: bin/logagent bin/consul bin/nats-server bin/benchrun ## logagent vs NATS JetStream and the machine's limits (~5 min); rewrites docs/benchmarks.md's bench region and docs/benchmarks.png (BENCH_FLAGS="-quick" for a smoke run)
	bin/benchrun -bin bin -out docs $(BENCH_FLAGS)

COST_FLAGS ?=

.PHONY: bench-cost
bench-cost: bin/logagent bin/consul bin/benchrun ## What partitions cost: idle CPU, RSS, descriptors, replica fetches, time to lead and failover at 100 to 10,000 partitions, produce at 1/30/300 (~20 min); rewrites docs/benchmarks.md's cost region and docs/benchmarks-cost.png (COST_FLAGS="-quick" for a smoke run)
	bin/benchrun cost -bin bin -out docs $(COST_FLAGS)

AB_ROUNDS ?= 10

.PHONY: ab
ab: bin/logagent bin/consul ## A/B of make bench's produce rows, BASE (a git revision, e.g. BASE=HEAD~3) against the working tree, one cluster at a time (AB_ROUNDS=10: ~12 min)
	@test -n "$(BASE)" || { echo "make ab: set BASE to a git revision, e.g. make ab BASE=HEAD~1"; exit 2; }
	rm -rf bin/ab-base && git worktree add --detach bin/ab-base $(BASE)
	cd bin/ab-base && $(GO) build -o ../logagent-base ./cmd/logagent; status=$$?; cd ../.. && git worktree remove --force bin/ab-base && exit $$status
	tools/bench/ab.sh bin/logagent-base bin/logagent $(AB_ROUNDS)

.PHONY: dev
dev: bin/logagent bin/consul ## Run Consul and three agents on localhost (Ctrl-C stops all)
	bin/logagent dev

# The status page's browser test (internal/testcluster TestStatusPage) drives
# Debian's chromium; `make test` installs it first when it is missing and
# make runs as root, and otherwise says loudly that the test will be skipped.
CHROMIUM_NAMES   := chromium chromium-browser google-chrome google-chrome-stable
CHROMIUM_MISSING := { echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	echo "!!! NO CHROMIUM ($(CHROMIUM_NAMES)): the status page test TestStatusPage WILL BE SKIPPED."; \
	echo "!!! Install it as root: apt-get update && apt-get install -y chromium"; \
	echo "!!! (or set LOGAGENT_CHROMIUM to a Chromium or Chrome binary)"; \
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

.PHONY: chromium
chromium: ## Install Debian's chromium for the status page test when missing (as root; otherwise say so loudly)
	@if [ -n "$$LOGAGENT_CHROMIUM" ] || for c in $(CHROMIUM_NAMES); do command -v $$c >/dev/null 2>&1 && break; false; done; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the status page test (apt-get, a few minutes)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } || $(CHROMIUM_MISSING); \
	else \
		$(CHROMIUM_MISSING); \
	fi

# The Kafka listener's kcat tests (internal/testcluster TestKafkaKcat and
# TestKafkaKcatGroup) and the README tour (cmd/logagent TestReadmeTour) run
# Debian's kcat (librdkafka); `make test` installs it first when it is
# missing and make runs as root, and otherwise says loudly what that does to
# the tests.
KCAT_MISSING := { echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	echo "!!! NO KCAT: the Kafka listener's kcat tests TestKafkaKcat and TestKafkaKcatGroup WILL BE SKIPPED,"; \
	echo "!!! and the README tour's test TestReadmeTour WILL FAIL."; \
	echo "!!! Install it as root: apt-get update && apt-get install -y kcat"; \
	echo "!!! (or set LOGAGENT_KCAT to a kcat binary)"; \
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

.PHONY: kcat
kcat: ## Install Debian's kcat for the Kafka listener's tests when missing (as root; otherwise say so loudly)
	@if [ -n "$$LOGAGENT_KCAT" ] || command -v kcat >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's kcat for the Kafka listener's test (apt-get)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq kcat; } || $(KCAT_MISSING); \
	else \
		$(KCAT_MISSING); \
	fi

# The install test (internal/testcluster TestInstallAsDocumented) runs
# systemd-analyze verify on the installed unit, from Debian's systemd package
# (nothing is started: the tool only reads unit files); the docs/api.md
# examples test (TestAPIDocExamples) runs the examples' curl command lines
# as written. `make test` installs each one first when it is missing and
# make runs as root, and otherwise says loudly that the tests will be
# skipped.
define APT_TOOL
	@if command -v $(1) >/dev/null 2>&1; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's $(2) for $(3) (apt-get)"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(2); } || $(call APT_MISSING,$(1),$(2),$(3)); \
	else \
		$(call APT_MISSING,$(1),$(2),$(3)); \
	fi
endef
APT_MISSING = { echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	echo "!!! NO $(1): $(3) WILL BE SKIPPED OR FAIL."; \
	echo "!!! Install it as root: apt-get update && apt-get install -y $(2)"; \
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

.PHONY: systemd
systemd: ## Install Debian's systemd (for systemd-analyze verify in the install test) and procps (the unit's /bin/kill) when missing (as root; otherwise say so loudly)
	$(call APT_TOOL,systemd-analyze,systemd,the install test's systemd-analyze verify (TestInstallAsDocumented/systemd-analyze_verify))
	$(call APT_TOOL,/bin/kill,procps,the install test TestInstallAsDocumented (the unit's ExecReload runs /bin/kill))

.PHONY: curl
curl: ## Install Debian's curl for the README tour's and the docs/api.md examples' tests when missing (as root; otherwise say so loudly)
	$(call APT_TOOL,curl,curl,the README tour's test TestReadmeTour and the docs/api.md examples test TestAPIDocExamples)

# franz-go's own integration tests (pkg/kgo v1.22.3, pinned in
# tools/kafkaconf/go.mod) against a dev cluster's Kafka listener: a
# conformance suite, too long for make test (docs/kafka.md).
.PHONY: kafka-conformance
kafka-conformance: bin/logagent bin/consul ## franz-go's kgo tests against a dev cluster's Kafka listener, one process per test (< 15 min; NOT part of make test); summary in bin/kafkaconf/summary.txt
	tools/kafkaconf/run.sh bin/logagent

# The Kafka listener's kafkajs test (internal/testcluster TestKafkaJS) runs a
# node script with kafkajs, pinned in its package-lock.json; `make test`
# installs it into the script's node_modules (npm ci, kept until the lock
# file changes), installing Debian's nodejs and npm first when they are
# missing and make runs as root, and otherwise says loudly that the test
# will be skipped.
KAFKAJS_DIR     := internal/testcluster/testdata/kafkajs
KAFKAJS_MISSING := { echo; echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	echo "!!! NO NODE/NPM OR NO KAFKAJS: the Kafka listener's kafkajs test TestKafkaJS WILL BE SKIPPED."; \
	echo "!!! Install node as root: apt-get update && apt-get install -y nodejs npm"; \
	echo "!!! then run: make kafkajs (npm ci in $(KAFKAJS_DIR))"; \
	echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; echo; }

.PHONY: kafkajs
kafkajs: ## Install kafkajs (npm ci) for the Kafka listener's test, and node and npm when missing (as root; otherwise say so loudly)
	@if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
			echo "installing Debian's nodejs and npm for the Kafka listener's kafkajs test (apt-get)"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm; \
		fi; \
	fi; \
	if ! command -v npm >/dev/null 2>&1; then \
		$(KAFKAJS_MISSING); \
	elif [ ! -f $(KAFKAJS_DIR)/node_modules/.package-lock.json ] || [ $(KAFKAJS_DIR)/package-lock.json -nt $(KAFKAJS_DIR)/node_modules/.package-lock.json ]; then \
		{ cd $(KAFKAJS_DIR) && npm ci --no-audit --no-fund --loglevel=error; } || $(KAFKAJS_MISSING); \
	fi

# The cluster tests and the fault scenarios each run alone: their bounds on
# stretches without an acknowledged write are about the agents, and beside
# another package's tests (segstore's crash tests fsync for minutes) the
# shared disk and the two cores stalled every agent's fsyncs for over a
# second (docs/design.md §13).
.PHONY: test
test: bin/logagent bin/consul chromium kcat kafkajs systemd curl ## Run every package's tests with -race, against the real Consul and binary (fault scenarios with JEPSEN_TIMING, their figures shown)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $$($(GO) list ./... | grep -v -e '/internal/jepsen$$' -e '/internal/testcluster$$')
	# The heap one crafted Kafka request may take, measured without the race detector's instrumentation (kafka/heap_test.go).
	$(GO) test -count=1 -run '^TestCraftedRequestHeap$$' ./kafka
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) ./internal/testcluster
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) -v ./internal/jepsen 2>&1 | tee jepsen.out | grep -E '$(JEPSEN_LINES)'
	@echo "full fault-injection log: jepsen.out"
	cd tools/bench && $(GO) test -race -count=1 ./...

bin/staticcheck: tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && $(GO) build -o ../../bin/staticcheck honnef.co/go/tools/cmd/staticcheck

.PHONY: torture
torture: bin/logagent bin/consul ## Long randomized runs: storage crashes, replication simulation, Consul failovers (~15 min), then fault-injection scenarios for DURATION
	SEGSTORE_CRASH_ITERS=$(TORTURE_CRASH_ITERS) LOGAGENT_REPLICATE_SIM_ITERATIONS=$(TORTURE_SIM_ITERS) \
	LOGAGENT_FAILOVER_CYCLES=$(TORTURE_FAILOVER_CYCLES) \
	$(GO) test -race -count=1 -timeout 3h -v -run 'TestCrashRecovery|TestRandomizedReplication|TestFailover$$' \
		./segstore ./replicate ./election 2>&1 | tee torture.out | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|crash iterations|failover with|median'
	LOGAGENT_JEPSEN_DURATION=$(DURATION) \
	$(GO) test -race -count=1 -timeout 6h -v -run 'TestScenarios' ./internal/jepsen 2>&1 | tee -a torture.out | \
		grep -E '$(JEPSEN_LINES)'
	@echo "full log: torture.out"

.PHONY: dead-agent
dead-agent: bin/logagent bin/consul ## kill -9 an agent and leave it dead past lag_time_max under acks=all load, DEAD_CYCLES times (JEPSEN_TIMING); prints docs/reliability.md's table
	LOGAGENT_JEPSEN_DEAD_CYCLES=$(DEAD_CYCLES) \
	$(GO) test -race -count=1 -timeout 3h -v -run 'TestScenarios/^dead-agent$$' ./internal/jepsen 2>&1 | tee dead-agent.out | \
		sed -n -E 's/^ +(\|.*)$$/\1/p; s/^ +[a-z_]+\.go:[0-9]+: jepsen: (.*checker (IN)?VALID.*)$$/\1/p; /: jepsen: dead-agent: |run kept in|^(--- |ok|FAIL)/p'
	@echo "full log: dead-agent.out"

.PHONY: duplicates
duplicates: bin/logagent bin/consul ## Producers resending until acknowledged while answers are lost and leaders killed, DUP_CYCLES times per variant (DUP_VARIANTS, JEPSEN_TIMING); prints the duplicates of each
	LOGAGENT_JEPSEN_DUP_CYCLES=$(DUP_CYCLES) \
	$(GO) test -race -count=1 -timeout 3h -v -run 'TestScenarios/^duplicates-($(DUP_VARIANTS))$$' ./internal/jepsen 2>&1 | tee duplicates.out | \
		sed -n -E 's/^ +[a-z_]+\.go:[0-9]+: jepsen: (duplicates-[a-z]+: .*)$$/\1/p; /run kept in|^ *(--- |ok|FAIL)/p'
	@echo "full log: duplicates.out"

.PHONY: check
check: bin/staticcheck ## gofmt, go vet and staticcheck (pinned in tools/lint/go.mod)
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	bin/staticcheck ./...

.PHONY: clean
clean: ## Remove built binaries and the dev cluster's state
	rm -rf bin .logagent-dev
