# NATS server built from the same pinned module the tests embed
# (github.com/nats-io/nats-server/v2 in pkg/go.mod; scripts/composecheck
# checks they agree and runs deploy/nats.conf on that version), into a
# distroless non-root image. compose.yaml mounts deploy/nats.conf.
# Build context: the repository root (for the healthcheck probe).

FROM golang:1.26.11-bookworm AS build
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

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/nats-server /nats-server
COPY --from=build /out/probe /probe
COPY --from=build --chown=65532:65532 /out/data /data
USER nonroot:nonroot
EXPOSE 4222
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 CMD ["/probe", "http://127.0.0.1:8222/healthz?js-enabled-only=true"]
ENTRYPOINT ["/nats-server"]
CMD ["-c", "/etc/nats/nats.conf"]
