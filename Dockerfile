# One image pattern for every service: multi-stage, static binary, distroless
# non-root runtime with no shell. Build with --build-arg SERVICE=gateway or
# services/auth, services/files, services/logs (compose.yaml does).
# scripts/composecheck checks this file keeps to the pattern.

# The base images, pinned. A machine that cannot pull them builds with
# local stand-ins passed as build arguments (scripts/dockerenv.sh,
# docs/deployment.md); these defaults are what users build with.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
ARG SERVICE
WORKDIR /src
# Only the shared module and the service itself; the service's go.mod
# replaces github.com/acme/platform/pkg with ../pkg or ../../pkg.
COPY pkg/ pkg/
COPY ${SERVICE}/ ${SERVICE}/
WORKDIR /src/${SERVICE}
# nodynamic: github.com/gen2brain/webp (files' WebP encoder) would
# otherwise link purego's loader of a system libwebp, which makes the binary
# dynamically linked (it needs ld-linux, absent from the static runtime
# image); with the tag it always uses its WebAssembly build, as it does
# wherever libwebp is not installed.
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
    go build -tags nodynamic -trimpath -ldflags="-s -w" -o /out/app .

FROM ${RUNTIME_IMAGE}
# The release, for `docker inspect` and upgrades (compose.yaml passes
# ACME_VERSION).
ARG VERSION=dev
LABEL org.opencontainers.image.version=${VERSION}
COPY --from=build /out/app /app
USER nonroot:nonroot
# `/app healthcheck` GETs its own /readyz (pkg/healthcheck): no shell needed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 CMD ["/app", "healthcheck"]
ENTRYPOINT ["/app"]
