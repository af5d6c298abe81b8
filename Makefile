# escrowd: `make run` and `make test` work on a fresh machine with nothing
# running. Without DATABASE_URL they start a throwaway PostgreSQL under
# ./.data/pg from the system's PostgreSQL binaries (scripts/pg.sh).
SHELL := /bin/bash
GO    ?= go
BIN   := bin/escrowd
DBURL  = $${DATABASE_URL:-$$(scripts/pg.sh start)}

.PHONY: build run test test-short bench fuzz db-start db-stop clean

build:
	$(GO) build -o $(BIN) ./cmd/escrowd

# Local trials deliver webhooks to receivers on this machine, which the
# service refuses by default (api-decisions §5).
run: build
	@export DATABASE_URL="$(DBURL)" && \
	  export ESCROW_WEBHOOK_ALLOW_PRIVATE=$${ESCROW_WEBHOOK_ALLOW_PRIVATE:-true} && \
	  ESCROW_LOG_FORMAT=$${ESCROW_LOG_FORMAT:-console} ./$(BIN) demo && \
	  exec env ESCROW_LOG_FORMAT=$${ESCROW_LOG_FORMAT:-console} ./$(BIN) serve

# The whole suite: vet, unit, conformance, concurrency and end-to-end HTTP
# tests, all under the race detector, against a real PostgreSQL.
test:
	@export DATABASE_URL="$(DBURL)" && \
	  $(GO) vet ./... && \
	  $(GO) test -race -count=1 -timeout 20m ./...

# BENCH selects benchmarks (default all); the pgbench baseline needs the
# pgbench binary (postgresql-client) and is skipped without it.
bench:
	@export DATABASE_URL="$(DBURL)" && \
	  $(GO) test -run '^$$' -bench "$${BENCH:-.}" $${BENCHTIME:+-benchtime $$BENCHTIME} -timeout 30m ./bench/

# Go fuzzes one target per invocation, so each runs for $(FUZZTIME) in turn
# (FUZZFLAGS adds flags, e.g. -parallel 1). The request fuzzers drive the
# real API on a database of their own, as the tests do. Inputs worth
# keeping go under the package's testdata/fuzz/<target>/, which plain
# `go test` replays.
FUZZTIME ?= 20s
FUZZ_TARGETS := \
	./domain/reference/:FuzzNormalizePhone ./domain/reference/:FuzzValidNUBAN \
	./domain/money/:FuzzParse ./httpapi/:FuzzParseDateBound ./httpapi/:FuzzFingerprintStreaming \
	./httpapi/:FuzzCustomerBodies ./httpapi/:FuzzEscrowBodies ./httpapi/:FuzzPaymentBodies \
	./httpapi/:FuzzCategoryBodies ./httpapi/:FuzzMerchantBodies ./httpapi/:FuzzMultipartBodies \
	./httpapi/:FuzzQueryParameters ./httpapi/:FuzzPathParameters ./httpapi/:FuzzRequestHeaders
fuzz:
	@export DATABASE_URL="$(DBURL)" && \
	  for t in $(FUZZ_TARGETS); do \
	    pkg=$${t%%:*}; name=$${t##*:}; \
	    echo "fuzz $$name ($$pkg) for $(FUZZTIME)"; \
	    $(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $(FUZZTIME) $(FUZZFLAGS) $$pkg || exit 1; \
	  done

db-start:
	@scripts/pg.sh start

db-stop:
	@scripts/pg.sh stop

clean:
	scripts/pg.sh stop; rm -rf bin .data
