# Mailyard — the commands people expect. `make run` and `make test` are the set-up.

GO            ?= go
TEMPORAL_CLI  := bin/temporal
# The Temporal CLI (with the real dev server and its UI) from the Go module proxy.
TEMPORAL_VER  := v1.5.1
# The real Temporal server and its SQL schema tool, for the end-to-end test of the
# production topology (PostgreSQL persistence, separate processes). Built into bin/
# like the CLI; never linked into mailyard (go.mod does not require the server).
TEMPORAL_SERVER_VER := v1.29.1
TEMPORAL_SERVER     := bin/temporal-server
TEMPORAL_SQL_TOOL   := bin/temporal-sql-tool
# The API reference UI at /docs (Stoplight Elements), embedded from api/docsui/elements.
ELEMENTS_VER  := 9.0.25
# staticcheck for make lint; a release that supports the Go in go.mod.
STATICCHECK_VER := v0.8.2
# The Redocly CLI that lints the API description (api/redocly_test.go), from
# the npm registry into bin/redocly.
REDOCLY_VER   := 2.11.1
REDOCLY       := bin/redocly/node_modules/.bin/redocly
# Pebble, Let's Encrypt's ACME test server, for the tests of the tracking
# domains' certificates (internal/trackingtls, internal/pebbletest).
PEBBLE_VER    := v2.10.1
PEBBLE        := bin/pebble

.PHONY: run test lint fuzz bench build migrate temporal temporal-server redocly pebble clean docs-assets

run: $(TEMPORAL_CLI) build
	bin/mailyard dev

# The same go build as deploy/Dockerfile (a static binary; make test checks the two
# agree), so what runs locally is what ships.
build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/mailyard ./cmd/mailyard

migrate: build
	bin/mailyard migrate up

temporal: $(TEMPORAL_CLI)

$(TEMPORAL_CLI):
	@echo "Building the Temporal dev server from the Go module proxy into $(TEMPORAL_CLI)."
	@echo "This happens once and takes a few minutes; later runs start in seconds."
	GOBIN=$(CURDIR)/bin $(GO) install github.com/temporalio/cli/cmd/temporal@$(TEMPORAL_VER)

# `go install` names the binaries after their packages (server, sql); they are built
# into a directory of their own and renamed, so a half-finished build leaves no file
# that make would take as done. One `go install` builds both (a grouped target, GNU
# make 4.3): the SQL tool shares most of its packages with the server, which are then
# compiled once instead of twice by two go commands side by side.
temporal-server: $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)

$(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) &:
	@echo "Building the Temporal server and temporal-sql-tool $(TEMPORAL_SERVER_VER) from the Go module proxy into bin/ (once, a few minutes)."
	rm -rf bin/.build-temporal-server
	GOBIN=$(CURDIR)/bin/.build-temporal-server $(GO) install \
		go.temporal.io/server/cmd/server@$(TEMPORAL_SERVER_VER) \
		go.temporal.io/server/cmd/tools/sql@$(TEMPORAL_SERVER_VER)
	mv bin/.build-temporal-server/server $(TEMPORAL_SERVER)
	mv bin/.build-temporal-server/sql $(TEMPORAL_SQL_TOOL)
	rm -rf bin/.build-temporal-server

pebble: $(PEBBLE)

$(PEBBLE):
	@echo "Building Pebble $(PEBBLE_VER) from the Go module proxy into $(PEBBLE) (once, under a minute)."
	GOBIN=$(CURDIR)/bin $(GO) install github.com/letsencrypt/pebble/v2/cmd/pebble@$(PEBBLE_VER)

# npm is needed for this one only; without it the lint test is skipped, except
# in CI, where .ci/run installs it first.
redocly: $(REDOCLY)

$(REDOCLY):
	npm install --prefix bin/redocly --no-audit --no-fund --silent @redocly/cli@$(REDOCLY_VER)

test: $(TEMPORAL_CLI) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) $(PEBBLE)
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

# Every fuzz test, as package:Target. `go test -fuzz` takes one target of one
# package at a time, so they run one after the other, FUZZTIME each. Their seed
# corpora (and inputs kept in testdata/fuzz) already run in `make test`.
FUZZTIME      ?= 30s
FUZZ_TARGETS  := \
	./internal/domainname:FuzzNormalize \
	./internal/domainname:FuzzNormalizeMailFrom \
	./internal/keys:FuzzCheckAPIKey \
	./internal/keys:FuzzDKIMRecordPublicKey \
	./internal/mailmsg:FuzzValidate \
	./internal/mailmsg:FuzzParseAddress \
	./internal/webhook:FuzzValidateURL \
	./internal/webhook:FuzzRetryAfter \
	./internal/webhook:FuzzBuildBody \
	./internal/dnsserver:FuzzServeDNS \
	./internal/smtpserver:FuzzReadMessage \
	./internal/bouncetag:FuzzEmailID \
	./internal/bouncereport:FuzzParse \
	./internal/bouncereport:FuzzRefold \
	./internal/trackhtml:FuzzRewrite \
	./internal/trackmime:FuzzRewrite \
	./internal/tracktoken:FuzzParse \
	./api:FuzzPageCursor \
	./api:FuzzIdempotencyKey

fuzz:
	@for f in $$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | cut -c6-); do \
		echo " $(FUZZ_TARGETS) " | grep -q ":$$f " || { echo "$$f is missing from FUZZ_TARGETS in the Makefile"; exit 1; }; \
	done
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t##*:}; \
		echo "== $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	$(GO) run go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0 ./workflows/...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VER) ./...

# Re-fetches the embedded docs UI from the npm registry for ELEMENTS_VER; commit the
# result. Only needed to change the version: the files are in the repository.
docs-assets:
	api/docsui/fetch-assets.sh $(ELEMENTS_VER)

# `make bench ONLY=email` (or api, delivery, inbound, tracking; comma-separated) runs some of
# them; `go run ./internal/bench -only tracking` is the same without make.
bench: $(TEMPORAL_CLI) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)
	$(GO) run ./internal/bench $(if $(ONLY),-only $(ONLY))

clean:
	rm -rf bin .data
