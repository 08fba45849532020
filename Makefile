# The two commands: `make run` starts the whole platform, `make test` proves it.
GO       ?= go
PKGS     := ./pkg/... ./gateway/... ./services/auth/... ./services/files/... ./services/logs/... ./scripts/...
TIMEOUT  ?= 30m

.PHONY: run test test-short bench minio vet fmt browser-deps test-console

## run: the whole platform on this machine, no Docker (gateway on http://127.0.0.1:8080)
run:
	$(GO) run ./scripts/devstack

## test: every test, race detector on, against real NATS, FerretDB and MinIO
test: minio browser-deps
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)

## minio: build the pinned MinIO server once into the cache (no-op when present)
minio:
	$(GO) run ./scripts/buildminio

## browser-deps: playwright-core for the console's browser tests (pinned, package-lock.json; Chromium is Debian's /usr/bin/chromium)
browser-deps:
	npm ci --prefix scripts/e2e/browser --no-audit --no-fund

## test-console: only the web console's browser scenarios (headless Chromium)
test-console: minio browser-deps
	cd scripts && $(GO) test -count=1 -run TestConsoleInBrowser ./e2e/

## bench: benchmarks side by side with the raw limits, printed as ratios
bench: minio
	$(GO) run ./scripts/bench

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w pkg gateway services scripts
