# NATS server built from the same pinned module the tests embed
# (github.com/nats-io/nats-server/v2 in pkg/go.mod; scripts/composecheck
# checks they agree and runs deploy/nats.conf on that version), into a
# distroless non-root image. compose.yaml mounts deploy/nats.conf.
# Build context: the repository root (for the healthcheck probe).

# The base images, pinned. A machine that cannot pull them builds with
# local stand-ins passed as build arguments (scripts/dockerenv.sh,
# docs/deployment.md); these defaults are what users build with.
ARG GO_IMAGE=golang:1.26.8-bookworm
ARG RUNTIME_IMAGE=gcr.io/distroless/static-debian12:nonroot

FROM ${GO_IMAGE} AS build
ARG NATS_SERVER_VERSION=v2.15.2
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOBIN=/out GOWORK=off GOFLAGS=-buildvcs=false \
    go install -trimpath -ldflags="-s -w" github.com/nats-io/nats-server/v2@${NATS_SERVER_VERSION}
WORKDIR /src
COPY pkg/ pkg/
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    cd pkg && CGO_ENABLED=0 GOWORK=off GOFLAGS=-buildvcs=false \
    go build -trimpath -ldflags="-s -w" -o /out/probe ./healthcheck/cmd/probe
# JetStream's store, owned by nonroot so a fresh named volume inherits it.
RUN mkdir -p /out/data

FROM ${RUNTIME_IMAGE}
COPY --from=build /out/nats-server /nats-server
COPY --from=build /out/probe /probe
COPY --from=build --chown=65532:65532 /out/data /data
USER nonroot:nonroot
EXPOSE 4222
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/probe", "http://127.0.0.1:8222/healthz?js-enabled-only=true"]
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/nats.conf"]
