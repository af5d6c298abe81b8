# escrowd: `make run` and `make test` work on a fresh machine with nothing
# running. Without DATABASE_URL they start this checkout's throwaway
# PostgreSQL from the system's PostgreSQL binaries (scripts/pg.sh: under
# ./.data/pg, on a port of its own; `scripts/pg.sh url` prints its URL).
SHELL := /bin/bash
GO    ?= go
BIN   := ./bin/escrowd
DBURL  = $${DATABASE_URL:-$$(scripts/pg.sh start)}

.PHONY: build run test test-short bench fuzz chaos kurrent-conformance db-start db-stop db-url clean

build:
	@$(GO) build -o $(BIN) ./cmd/escrowd

# The sandbox (`escrowd serve --help`): it claims ESCROW_ADDR first, so a
# taken port is reported before anything else, then starts the throwaway
# database unless DATABASE_URL is set, turns the rate limit off unless
# ESCROW_RATE_LIMIT_PER_MINUTE is set, allows webhooks to receivers on this
# machine, and prints the demo merchant's keys.
run: build
	@exec $(BIN) serve --demo

# The whole suite: vet, unit, conformance, concurrency and end-to-end HTTP
# tests, all under the race detector, against a real PostgreSQL. The
# checkout page's browser tests need headless Chromium: scripts/chromium.sh
# installs Debian's package when it is missing (as root; otherwise they skip).
test:
	@scripts/chromium.sh >/dev/null && \
	  DATABASE_URL="$(DBURL)" && export DATABASE_URL && \
	  $(GO) vet ./... && \
	  KURRENT_CONFORMANCE=1 $(GO) test -race -count=1 -timeout 45m ./...

# BENCH selects benchmarks (default all); the pgbench baseline needs the
# pgbench binary (postgresql-client) and is skipped without it.
# BenchmarkScale writes a store of SCALE_EVENTS events (default 1,000,000,
# several minutes) before it measures; SCALE_EVENTS=50000 is a quick look.
bench:
	@DATABASE_URL="$(DBURL)" && export DATABASE_URL && \
	  $(GO) test -run '^$$' -bench "$${BENCH:-.}" $${BENCHTIME:+-benchtime $$BENCHTIME} -timeout 90m ./bench/

# Go fuzzes one target per invocation, so each runs for $(FUZZTIME) in turn
# (FUZZFLAGS adds flags, e.g. -parallel 1). The request fuzzers drive the
# real API on a database of their own, as the tests do. Inputs worth
# keeping go under the package's testdata/fuzz/<target>/, which plain
# `go test` replays.
FUZZTIME ?= 20s
FUZZ_TARGETS := \
	./domain/reference/:FuzzNormalizePhone ./domain/reference/:FuzzValidNUBAN \
	./domain/money/:FuzzParse ./domain/ledger/:FuzzValidClientReference ./internal/files/:FuzzStoredNames \
	./eventstore/:FuzzTenantOfMeta ./httpapi/:FuzzParseDateBound ./httpapi/:FuzzFingerprintStreaming \
	./httpapi/:FuzzCustomerBodies ./httpapi/:FuzzEscrowBodies ./httpapi/:FuzzPaymentBodies \
	./httpapi/:FuzzCategoryBodies ./httpapi/:FuzzMerchantBodies ./httpapi/:FuzzMultipartBodies \
	./httpapi/:FuzzQueryParameters ./httpapi/:FuzzPathParameters ./httpapi/:FuzzRequestHeaders
fuzz:
	@DATABASE_URL="$(DBURL)" && export DATABASE_URL && \
	  for t in $(FUZZ_TARGETS); do \
	    pkg=$${t%%:*}; name=$${t##*:}; \
	    echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg || exit 1; \
	  done

# The chaos harness (internal/chaos) for CHAOS_DURATION of workload under
# kills and database restarts (TestChaos starts a PostgreSQL of its own),
# then the three instances behind a proxy for INSTANCES_DURATION of
# workload under kills (TestThreeInstances, on the throwaway database
# unless DATABASE_URL is set). `make test` runs them for 40 s and 6 s.
CHAOS_DURATION ?= 10m
INSTANCES_DURATION ?= 5m
chaos:
	@DATABASE_URL="$(DBURL)" && export DATABASE_URL && \
	  $(GO) test -count=1 -v -run '^(TestChaos|TestThreeInstances)$$' -timeout 90m ./internal/chaos/ \
	    -chaos.duration=$(CHAOS_DURATION) -instances.duration=$(INSTANCES_DURATION)

# The official KurrentDB Go client's own integration tests (appends,
# multi-stream appends, AppendRecords, stream and $all reads,
# subscriptions) against the protocol double, on the insecure and TLS node
# addresses they expect (localhost:2114 and :2115); with KURRENTDB_URL set,
# against the real server listening there. docs/kurrentdb.md lists what the
# double leaves out and why. `make test` runs it too.
kurrent-conformance:
	KURRENT_CONFORMANCE=1 $(GO) test -count=1 -v -run '^TestOfficialClientSuites$$' ./eventstore/kurrent/conformance/

db-start:
	@scripts/pg.sh start

db-stop:
	@scripts/pg.sh stop

db-url:
	@scripts/pg.sh url

clean:
	scripts/pg.sh clean; rm -rf bin .data
