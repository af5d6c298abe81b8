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

# Go fuzzes one target per invocation, so each runs for $(FUZZTIME) in turn.
FUZZTIME ?= 20s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzNormalizePhone$$' -fuzztime $(FUZZTIME) ./domain/reference/ && \
	  $(GO) test -run '^$$' -fuzz '^FuzzValidNUBAN$$' -fuzztime $(FUZZTIME) ./domain/reference/ && \
	  $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./domain/money/ && \
	  $(GO) test -run '^$$' -fuzz '^FuzzFingerprintStreaming$$' -fuzztime $(FUZZTIME) ./httpapi/

db-start:
	@scripts/pg.sh start

db-stop:
	@scripts/pg.sh stop

clean:
	scripts/pg.sh stop; rm -rf bin .data
