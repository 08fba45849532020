# The two commands: `make run` starts the whole platform, `make test` proves it.
GO       ?= go
PKGS     := ./pkg/... ./gateway/... ./services/auth/... ./services/backup/... ./services/files/... ./services/logs/... ./scripts/...
TIMEOUT  ?= 30m

.PHONY: run info backup restore test-backup test test-security test-short test-faults test-compose test-scale test-ha test-swarm soak bench minio vet fmt fuzz packages test-console

## run: the whole platform on this machine, no Docker (gateway on http://127.0.0.1:8080)
run:
	$(GO) run ./scripts/devstack

## info: print make run's banner again (addresses and logins), kept in DATA_DIR/banner.txt (./data by default)
info:
	@f="$${DATA_DIR:-data}/banner.txt"; if [ -f "$$f" ]; then cat "$$f"; else echo "no banner in $$f: make run writes it once the platform is up"; exit 1; fi

## backup: a backup of the platform `make run` is running on DATA_DIR into TO (a new directory, or s3://bucket/prefix with BACKUP_TARGET_S3_*), its dev-secrets.json included (docs/operations.md#backups)
backup:
	@test -n "$(TO)" || { echo 'usage: make backup TO=DIR'; exit 2; }
	$(GO) run ./scripts/devbackup backup "$(TO)"

## restore: FROM into the platform `make run` is running on DATA_DIR (one that holds nothing but its first start; REPLACE=1: whatever it holds), then its services restarted; DEV_SECRETS=1 takes AUTH_MFA_KEY and the administrator's login from the backup
restore:
	@test -n "$(FROM)" || { echo 'usage: make restore FROM=DIR [DEV_SECRETS=1] [REPLACE=1]'; exit 2; }
	$(GO) run ./scripts/devbackup restore "$(FROM)"

## test-backup: a platform with data backed up under load, wiped, restored into a new one and checked (docs/testing.md); a damaged backup refused
test-backup: minio
	$(GO) test -count=1 -v -timeout 30m ./services/backup/...
	$(GO) test -count=1 -v -timeout 30m -run '^TestBackup' ./scripts/e2e

## test: every test, race detector on, against real NATS, FerretDB and MinIO, and the console in Chromium; then the hostile-input suite
test: packages minio
	$(GO) vet $(PKGS)
	$(GO) test -race -count=1 -timeout $(TIMEOUT) -skip '^TestHostile' $(PKGS)
	cd deploy/s3setup && GOWORK=off $(GO) vet ./... && GOWORK=off $(GO) test -race -count=1 -timeout $(TIMEOUT) ./...
	$(MAKE) test-security

## test-security: the hostile-input suite: every attack of the security review replayed against the real processes (docs/reliability.md#the-hostile-input-suite)
test-security: packages minio
	$(GO) test -count=1 -timeout 20m -run '^(TestHostile|TestAuthorizationMatrix$$)' ./scripts/e2e

## test-short: the fast tier: unit tests with fakes only, no server started (about a minute with the build)
test-short:
	$(GO) test -short -count=1 $(PKGS)
	cd deploy/s3setup && GOWORK=off $(GO) test -short -count=1 ./...

## test-faults: the fault suite: real servers and service processes stopped, killed and paused mid-traffic
test-faults: minio
	$(GO) test -tags faults -count=1 -v -timeout 20m ./scripts/faults

## test-compose: the compose stack in containers (needs Docker): images built from the Dockerfiles, up --wait, used through the gateway's port, down and up again; removes everything it made
test-compose:
	$(GO) vet -tags containers ./scripts/containers/...
	$(GO) test -tags containers -count=1 -v -timeout 60m -run 'TestCompose$$' ./scripts/containers; \
	  rc=$$?; bash scripts/containers/cleanup.sh; exit $$rc

## test-scale: the compose stack scaled, replicas killed, cut off and upgraded under load (needs Docker); prints a table of figures
test-scale:
	$(GO) test -tags containers -count=1 -v -timeout 60m -run 'TestScale$$' ./scripts/containers; \
	  rc=$$?; bash scripts/containers/cleanup.sh; exit $$rc

## test-ha: the high-availability profile (compose.ha.yaml) in containers: NATS and MinIO nodes killed and cut off under load (needs Docker); prints a table of figures
test-ha:
	$(GO) test -tags containers -count=1 -v -timeout 60m -run 'TestHA$$' ./scripts/containers; \
	  rc=$$?; bash scripts/containers/cleanup.sh; exit $$rc

## test-swarm: deploy/stack.yaml on a one-node Docker Swarm (initialised and left again if none is active): scaled, a task killed, a new image rolled out and a failing one rolled back under load, stack removed (needs Docker); prints a table of figures
test-swarm:
	$(GO) vet -tags containers ./scripts/containers/...
	$(GO) test -tags containers -count=1 -v -timeout 40m -run 'TestSwarm$$' ./scripts/containers; \
	  rc=$$?; bash scripts/containers/swarm-cleanup.sh; bash scripts/containers/cleanup.sh; exit $$rc

## soak: a fixed-rate mix through the gateway for SOAK_DURATION (10m); fails on errors or >10% growth
soak: minio
	$(GO) run ./scripts/soak

## minio: build the pinned MinIO server and the FerretDB server program once into the cache (no-op when present)
minio:
	$(GO) run ./scripts/buildminio

## packages: Debian's chromium (browser tests) and python3-tuspy (the tus client of the upload test): apt-get install when missing, as root; else says how
packages:
	sh scripts/ensure-packages.sh

## test-console: only the web console's browser scenarios (headless Chromium, driven with chromedp)
test-console: packages minio
	cd scripts && $(GO) test -count=1 -run TestConsoleInBrowser ./e2e/

## bench: benchmarks side by side with the raw limits, printed as ratios
bench: minio
	$(GO) run ./scripts/bench

## fuzz: every fuzz target in turn for FUZZTIME (default 30s) each; prints executions and findings
fuzz:
	FUZZTIME=$(or $(FUZZTIME),30s) GO=$(GO) sh scripts/fuzz/run.sh

vet:
	$(GO) vet $(PKGS)

fmt:
	gofmt -w pkg gateway services scripts
