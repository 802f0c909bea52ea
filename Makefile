# Mailyard — the commands people expect. `make run` and `make test` are the set-up.

GO            ?= go
# The Temporal CLI (with the real dev server and its UI), and the real Temporal
# server with its SQL schema tool, for the end-to-end test of the production
# topology (PostgreSQL persistence, separate processes). Their versions are in
# tools/temporal/go.mod (CLI v1.5.1, server v1.29.1), a module of their own:
# mailyard's go.mod requires none of them. Built into bin/ from the Go module proxy.
TEMPORAL_CLI        := bin/temporal
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
temporal-server: $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL)

# One go build for the three binaries (a grouped target, GNU make 4.3), in the one
# module graph of tools/temporal: the CLI embeds the server, so the server's
# packages are compiled once for both instead of twice by two `go install`s whose
# graphs differ (the CLI's requires newer grpc, otel, x/net and SDK versions than
# the server's own go.mod, so nearly every package differed). The server is then
# built with the dependency versions the CLI's dev server ships with. A build
# directory of its own, renamed after: a half-finished build leaves no file that
# make would take as done. Linked without DWARF (-w; stack traces keep their
# symbols): the three links take 12 s instead of 19.
$(TEMPORAL_CLI) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) &: tools/temporal/go.mod tools/temporal/go.sum
	@echo "Building the Temporal CLI, server and temporal-sql-tool (tools/temporal/go.mod) from the Go module proxy into bin/."
	@echo "This happens once and takes a few minutes; later runs start in seconds."
	rm -rf bin/.build-temporal
	$(GO) build -C tools/temporal -ldflags=-w -o $(CURDIR)/bin/.build-temporal/ tool
	mv bin/.build-temporal/temporal $(TEMPORAL_CLI)
	mv bin/.build-temporal/server $(TEMPORAL_SERVER)
	mv bin/.build-temporal/sql $(TEMPORAL_SQL_TOOL)
	rm -rf bin/.build-temporal

pebble: $(PEBBLE)

$(PEBBLE):
	@echo "Building Pebble $(PEBBLE_VER) from the Go module proxy into $(PEBBLE) (once, under a minute)."
	GOBIN=$(CURDIR)/bin $(GO) install github.com/letsencrypt/pebble/v2/cmd/pebble@$(PEBBLE_VER)

# npm is needed for this one only; without it the lint test is skipped, except
# in CI, where .ci/run installs it first.
redocly: $(REDOCLY)

$(REDOCLY):
	npm install --prefix bin/redocly --no-audit --no-fund --silent @redocly/cli@$(REDOCLY_VER)

# vet runs with -race, the build configuration of the tests, so the packages it
# compiles for type information are the ones `go test -race` links: on a cold
# cache a plain `go vet` compiled every dependency a second time (about 200 s of
# a fresh clone's CI on 2 cores). `make lint` vets the plain build.
test: $(TEMPORAL_CLI) $(TEMPORAL_SERVER) $(TEMPORAL_SQL_TOOL) $(PEBBLE)
	$(GO) vet -race ./...
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
	./internal/mailmsg:FuzzPrepareSubmitted \
	./internal/webhook:FuzzValidateURL \
	./internal/webhook:FuzzRetryAfter \
	./internal/webhook:FuzzBuildBody \
	./internal/dnsserver:FuzzServeDNS \
	./internal/smtpserver:FuzzReadMessage \
	./internal/bouncetag:FuzzParse \
	./internal/bouncereport:FuzzParse \
	./internal/bouncereport:FuzzRefold \
	./internal/trackhtml:FuzzRewrite \
	./internal/trackmime:FuzzRewrite \
	./internal/tracktoken:FuzzParse \
	./internal/textclean:FuzzLine \
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
